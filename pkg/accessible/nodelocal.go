package accessible

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
	terms, kind := requisite, "requisite"
	if len(terms) == 0 {
		terms, kind = preferred, "preferred"
	}
	if len(terms) == 0 || slices.ContainsFunc(terms, func(t *csi.Topology) bool { return host.admits(nodeKey, t) }) {
		return o.Pin(host), nil
	}
	return Decision{}, status.Error(codes.ResourceExhausted, foreignNodeMessage(connection, nodeKey, host, kind, terms))
}

// foreignNodeMessage explains why a node-local volume is not created here:
// the node asked for (when the terms name one) and what this node is.
func foreignNodeMessage(connection, nodeKey string, host Host, kind string, terms []*csi.Topology) string {
	var sb strings.Builder
	sb.WriteString("connection ")
	sb.WriteString(strconv.Quote(connection))
	sb.WriteString(" is node-local (its volumes stay on the disk of the node that creates them) and this controller runs on node ")
	sb.WriteString(strconv.Quote(host.Name))
	var asked []string
	for _, t := range terms {
		if n := t.GetSegments()[nodeKey]; n != "" && !slices.Contains(asked, n) {
			asked = append(asked, n)
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
