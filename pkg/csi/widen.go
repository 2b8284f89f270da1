package csi

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
)

// errWidens says why a created volume cannot be handed back: the upstream
// answered accessible_topology (its volume is not reachable everywhere),
// and the connection declares no topology, so the proxy would report it
// reachable from more nodes than the upstream does (SPEC §8: topology is
// never widened). The upstream's keys cannot be passed on (kubelet
// registers only the proxy's keys as node labels), so the admin must
// declare where the storage is.
type errWidens struct {
	connection, file string
	upstream         []*csi.Topology
	// nodeKey is set under the node topology type: the request named no
	// node to pin the volume to, which is why it would be widened.
	nodeKey string
}

func (e errWidens) Error() string {
	why := "so the proxy would report it reachable everywhere"
	if e.nodeKey != "" {
		why = fmt.Sprintf("and the request's accessibility_requirements name no node (%s) to pin it to, so the proxy would report it reachable beyond the upstream's topology", e.nodeKey)
	}
	return fmt.Sprintf("the upstream answered accessible_topology %s (its volume is not reachable from every node), but the connection declares no proxy.perDriver.topology, %s; declare where this storage is reachable in proxy.perDriver.topology of %s (requirements with this proxy's node topology keys)",
		formatTopologies(e.upstream), why, e.file)
}

// checkNotWidened returns errWidens when handing back a volume whose
// upstream answered topology, with decision as its accessible_topology,
// would widen it. It would not when the connection declares topology (the
// admin said where the storage is), or when, under the node topology type,
// decision pins the volume to the node the CO asked for (a node is no
// wider than any topology the upstream can answer). Any other decision of
// a connection without topology is everywhere, or the terms of a request
// that knows nothing of the upstream's topology: wider. (Node-local
// connections are the built-in local-hostpath, which answers no topology;
// the proxy pins their volumes itself.)
func (d *Driver) checkNotWidened(c *connection.Connection, decision accessible.Decision, upstream []*csi.Topology) error {
	if len(upstream) == 0 || len(c.Config.Proxy.PerDriver.Topology) > 0 {
		return nil
	}
	err := errWidens{connection: c.Name, file: c.File, upstream: upstream}
	if d.opts.Topology.Type == accessible.TypeNode {
		err.nodeKey = d.opts.Topology.NodeKey()
		if decision.Constrains(err.nodeKey) {
			return nil
		}
	}
	return err
}

// widenCode is the status of a create refused by checkNotWidened: the
// admin must change the connection file before the call can succeed.
const widenCode = codes.FailedPrecondition

// formatTopologies renders at most five terms, each with sorted keys, for
// a message: [{a=1,b=2}, {a=3}] (+N more).
func formatTopologies(ts []*csi.Topology) string {
	const maxShown = 5
	var sb strings.Builder
	sb.WriteByte('[')
	for i, t := range ts {
		if i == maxShown {
			fmt.Fprintf(&sb, " (+%d more)", len(ts)-maxShown)
			break
		}
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteByte('{')
		for j, k := range slices.Sorted(maps.Keys(t.GetSegments())) {
			if j > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(truncate(k, 128) + "=" + truncate(t.GetSegments()[k], 128))
		}
		sb.WriteByte('}')
	}
	sb.WriteByte(']')
	return sb.String()
}
