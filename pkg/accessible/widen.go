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
	return fmt.Sprintf("the upstream answered accessible_topology %s (its volume is not reachable from every node), but the connection declares no proxy.perDriver.topology, %s; in %s, map the upstream's keys to this proxy's in proxy.perDriver.upstreamTopology (e.g. {%s: node} for a node-local driver), or declare where this storage is reachable in proxy.perDriver.topology (requirements with this proxy's node topology keys)",
		showTopologies(e.Upstream), why, e.File, firstKey(e.Upstream))
}

// firstKey is the first key of an answer, for the example in a message.
func firstKey(ts []*csi.Topology) string {
	for _, t := range ts {
		if segs := termSegments(t); len(segs) > 0 {
			return short(segs[0].key)
		}
	}
	return "<upstream key>"
}

// Created is the accessible_topology of a volume the upstream created
// for a CreateVolume decided as decision, when the upstream answered
// upstream; file names the connection file in refusals. An error is a
// refusal (the caller deletes the volume, AnswerCode).
//
// An upstream that answers no topology leaves decision as it is. A
// connection with upstreamTopology gets the answer translated
// (Compiled.Answer, SPEC §13); a node-local one must have been placed on
// Host, the node whose controller asked (an upstream that names its node
// otherwise is configured with another node name, and its volume would be
// pinned to a node that does not exist). Without the map an answer is
// never widened (SPEC §8): a connection with a topology list keeps its
// own decision (the admin said where the storage is); under the node
// topology type a decision that pins the volume to the node the CO asked
// for stands (a node is no wider than any topology the upstream can
// answer); anything else is a WidenError.
func (p Placement) Created(file string, t *Compiled, decision Decision, upstream, requisite []*csi.Topology) (Decision, error) {
	if len(upstream) == 0 {
		return decision, nil
	}
	if !t.upstream.Empty() {
		d, err := t.Answer(upstream, requisite)
		if err != nil {
			return Decision{}, err
		}
		if t.nodeLocal {
			if d.Everywhere() {
				// Answer refuses empty terms, so this is a safety net: a
				// node-local volume is never reachable from every node.
				return Decision{}, fmt.Errorf("the upstream answered accessible_topology %s, which names no node, but the connection is node-local (its volumes live on one node's disk)",
					showTopologies(upstream))
			}
			for _, top := range d.topologies {
				if n := top[t.nodeKey]; n != p.Host.Name {
					return Decision{}, fmt.Errorf("the upstream answered accessible_topology %s, which puts the volume on node %q, but this node-local connection's controller runs on node %q: give the upstream the proxy's node name (its node id, e.g. CSI_NODE_ID=$NODE_NAME)",
						showTopologies(upstream), short(n), p.Host.Name)
				}
			}
		}
		return d, nil
	}
	if len(t.entries) > 0 {
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
