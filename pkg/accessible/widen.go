package accessible

import (
	"fmt"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
)

// WidenError says why a created volume cannot be handed back: the
// upstream answered accessible_topology (its volume is not reachable
// everywhere), and the connection declares no topology, so the proxy
// would report it reachable from more nodes than the upstream does (SPEC
// §8: topology is never widened). The upstream's keys cannot be passed on
// (kubelet registers only the proxy's keys as node labels), so the admin
// must declare where the storage is, or map the upstream's keys.
type WidenError struct {
	// File is the connection file, where the admin declares either.
	File string
	// Upstream is what the upstream answered.
	Upstream []*csi.Topology
	// NodeKey is set under the node topology type: the request named no
	// node to pin the volume to, which is why it would be widened.
	NodeKey string
}

func (e WidenError) Error() string {
	why := "so the proxy would report it reachable everywhere"
	if e.NodeKey != "" {
		why = fmt.Sprintf("and the request's accessibility_requirements name no node (%s) to pin it to, so the proxy would report it reachable beyond the upstream's topology", e.NodeKey)
	}
	return fmt.Sprintf("the upstream answered accessible_topology %s (its volume is not reachable from every node), but the connection declares no proxy.perDriver.topology, %s; declare where this storage is reachable in proxy.perDriver.topology of %s (requirements with this proxy's node topology keys)",
		showTopologies(e.Upstream), why, e.File)
}

// Created is the accessible_topology of a volume the upstream created
// for a CreateVolume decided as decision, when the upstream answered
// upstream; file names the connection file in refusals. An error is a
// refusal (the caller deletes the volume, AnswerCode).
//
// An upstream that answers no topology leaves decision as it is. One that
// does is never widened (SPEC §8): a connection with a topology list
// keeps its own decision (the admin said where the storage is); under the
// node topology type a decision that pins the volume to the node the CO
// asked for stands (a node is no wider than any topology the upstream can
// answer); anything else is a WidenError.
func (p Placement) Created(file string, t *Compiled, decision Decision, upstream []*csi.Topology) (Decision, error) {
	if len(upstream) == 0 || len(t.entries) > 0 {
		return decision, nil
	}
	err := WidenError{File: file, Upstream: upstream}
	if t.opts.Type == TypeNode {
		err.NodeKey = t.nodeKey
		if decision.Constrains(err.NodeKey) {
			return decision, nil
		}
	}
	return Decision{}, err
}
