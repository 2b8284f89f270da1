package csi

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/democratic-csi/proxy-topology/pkg/connection"
)

// typeNode is the node topology type under which a connection without
// topology pins every volume to the node that asked for it, so an
// upstream's own topology is never widened there.
const typeNode = "node"

// errWidens says why a created volume cannot be handed back: the upstream
// answered accessible_topology (its volume is not reachable everywhere),
// and the connection declares no topology, so the proxy would report it
// reachable from every node (SPEC §8: topology is never widened). The
// upstream's keys cannot be passed on (kubelet registers only the proxy's
// keys as node labels), so the admin must declare where the storage is.
type errWidens struct {
	connection, file string
	upstream         []*csi.Topology
}

func (e errWidens) Error() string {
	return fmt.Sprintf("the upstream answered accessible_topology %s (its volume is not reachable from every node), but the connection declares no proxy.perDriver.topology, so the proxy would report it reachable everywhere; declare where this storage is reachable in proxy.perDriver.topology of %s (requirements with this proxy's node topology keys)",
		formatTopologies(e.upstream), e.file)
}

// checkNotWidened returns errWidens when handing back a volume whose
// upstream answered topology would widen it: the connection declares no
// topology and the node topology type is not node (which pins such
// volumes to a node anyway).
func (d *Driver) checkNotWidened(c *connection.Connection, upstream []*csi.Topology) error {
	if len(upstream) == 0 || len(c.Config.Proxy.PerDriver.Topology) > 0 || d.opts.Topology.Type == typeNode {
		return nil
	}
	return errWidens{connection: c.Name, file: c.File, upstream: upstream}
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
