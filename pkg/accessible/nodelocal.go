package accessible

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/labels"
)

// Host is the node whose controller serves a node-local connection: the
// node that holds every volume that controller creates (SPEC §12).
type Host struct {
	// Name is the node name (the node id); the pin is NodeKey=Name.
	Name string
	// Segments are the node's topology segments as NodeGetInfo reports
	// them, when this process is also the node plugin; nil when it is not
	// (a controller-only process knows nothing of its node but its name).
	Segments map[string]string
}

// segment returns the value the host carries for a full key; the node key
// is always known, from the name.
func (h Host) segment(nodeKey, key string) (string, bool) {
	if key == nodeKey {
		return h.Name, h.Name != ""
	}
	v, ok := h.Segments[key]
	return v, ok
}

// admits reports whether the host carries every segment of term.
func (h Host) admits(nodeKey string, term *csi.Topology) bool {
	for k, v := range term.GetSegments() {
		if have, ok := h.segment(nodeKey, k); !ok || have != v {
			return false
		}
	}
	return true
}

// Pin is the accessible_topology of every volume of a node-local
// connection served by host: that node alone, by the node key.
func (o Options) Pin(host Host) Decision { return Pinned(o.NodeKey(), host.Name) }

// AdmitsHost reports whether a node-local connection served by host can
// serve a volume accessible from topology (GetCapacity): the host must
// carry every segment of it. An empty topology is always admitted.
func (o Options) AdmitsHost(host Host, topology *csi.Topology) bool {
	return host.admits(o.NodeKey(), topology)
}

// DecideNodeLocal answers a CreateVolume for a node-local connection (a
// local-hostpath connection without a topology list, SPEC §12): the
// volume will live on host's disk, so it is pinned to host by the node
// key, whatever the node topology type. That is only right if the CO may
// use host: with no requirements it may; otherwise some requisite term
// (preferred when there is no requisite) must be one host satisfies —
// every segment of the term carried by host. A term naming another node
// (the selected node of a WaitForFirstConsumer claim, with a provisioner
// on every node) is RESOURCE_EXHAUSTED naming the connection, this node
// and the node asked for, so the provisioner on the right node takes the
// claim (or the scheduler picks again); creating the volume here would put
// the data on a node the pod does not run on.
func (o Options) DecideNodeLocal(connection string, host Host, requisite, preferred []*csi.Topology) (Decision, error) {
	nodeKey := o.NodeKey()
	if host.Name == "" {
		return Decision{}, status.Errorf(codes.FailedPrecondition,
			"connection %q is node-local (its volumes stay on the disk of the node that creates them) but this controller does not know its node name (--node-id, NODE_NAME): it cannot say where the volume lives", connection)
	}
	if err := NodeNameError(o, host.Name, []string{connection}); err != nil {
		return Decision{}, status.Error(codes.FailedPrecondition, err.Error())
	}
	terms, kind := requisite, "requisite"
	if len(terms) == 0 {
		terms, kind = preferred, "preferred"
	}
	if len(terms) == 0 || slices.ContainsFunc(terms, func(t *csi.Topology) bool { return host.admits(nodeKey, t) }) {
		return o.Pin(host), nil
	}
	return Decision{}, status.Error(codes.ResourceExhausted, foreignNodeMessage(connection, nodeKey, host, kind, terms))
}

// NodeNameError says why node-local volumes cannot live on the node
// named name, nil when they can: they are pinned by the node key with the
// node name as its value (SPEC §12), and a name that is no label value
// (longer than 63 bytes, as cloud node names with long domains can be)
// gives a PV affinity no node can ever satisfy, since kubelet can put no
// such label on the node. The node plugin does not report the key then
// (NodeGetInfo would fail registration), and CreateVolume of the
// node-local connections refuses with this reason rather than create a
// volume no pod could use. connections are named in the message.
func NodeNameError(o Options, name string, connections []string) error {
	if name == "" {
		return nil
	}
	err := labels.ValueError(name)
	if err == nil {
		return nil
	}
	what := "connection " + strconv.Quote(connections[0]) + " is"
	if len(connections) > 1 {
		quoted := make([]string, len(connections))
		for i, c := range connections {
			quoted[i] = strconv.Quote(c)
		}
		what = "connections " + strings.Join(quoted, ", ") + " are"
	}
	return fmt.Errorf("%s node-local (its volumes stay on the disk of the node that creates them): a volume is pinned to its node by %s=<node name>, but node name %q (%d bytes) is not a valid label value (%v), so no node could carry that label; give the node a name that is a label value, or declare proxy.perDriver.topology for storage reachable from other nodes (docs/topology.md §3)",
		what, o.NodeKey(), name, len(name), err)
}

// foreignNodeMessage explains why a node-local volume is not created here:
// the node asked for (when the terms name one) and what this node is.
func foreignNodeMessage(connection, nodeKey string, host Host, kind string, terms []*csi.Topology) string {
	var sb strings.Builder
	sb.WriteString("connection ")
	sb.WriteString(strconv.Quote(connection))
	sb.WriteString(" is node-local (its volumes stay on the disk of the node that creates them) and this controller runs on node ")
	sb.WriteString(strconv.Quote(host.Name))
	// The nodes asked for matter only when there is one: two are enough
	// to know, and looking further would cost O(n²) on n nodes.
	var asked []string
	for _, t := range terms {
		if n := t.GetSegments()[nodeKey]; n != "" && !slices.ContainsFunc(asked, func(a string) bool { step(); return a == n }) {
			if asked = append(asked, n); len(asked) == 2 {
				break
			}
		}
	}
	switch {
	case len(asked) == 1:
		sb.WriteString(", but the volume is asked for node ")
		sb.WriteString(strconv.Quote(asked[0]))
		sb.WriteString(": the controller on node ")
		sb.WriteString(strconv.Quote(asked[0]))
		sb.WriteString(" must create it (node-local deployment mode)")
	default:
		sb.WriteString(", which ")
		if len(terms) == 1 {
			sb.WriteString("topology ")
			writeSegments(&sb, termSegments(terms[0]))
			sb.WriteString(" (" + kind + ") does not admit")
		} else {
			sb.WriteString("none of the topologies ")
			writeList(&sb, len(terms), func(i int) []segment { return termSegments(terms[i]) })
			sb.WriteString(" (" + kind + ") admits")
		}
		sb.WriteString(" (node ")
		sb.WriteString(strconv.Quote(host.Name))
		if len(host.Segments) > 0 {
			sb.WriteString(" reports ")
			segs := make([]segment, 0, len(host.Segments))
			for _, k := range slices.Sorted(maps.Keys(host.Segments)) {
				segs = append(segs, segment{k, host.Segments[k]})
			}
			writeSegments(&sb, segs)
		} else {
			sb.WriteString(" is known here by name only")
		}
		sb.WriteString(")")
	}
	return sb.String()
}
