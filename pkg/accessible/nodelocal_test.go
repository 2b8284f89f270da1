package accessible

import (
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
)

// TestDecideNodeLocal: a node-local connection's volume is pinned to the
// node whose controller creates it, by <prefix>/node, in every node
// topology type and for every request shape the external-provisioner
// sends (SPEC §9, §12); a request for another node is refused.
func TestDecideNodeLocal(t *testing.T) {
	// n1 is in zone z1 of a cluster whose nodes report cluster, zone and
	// (node-local mode) node.
	n1 := Host{Name: "n1", Segments: kvs(pk("cluster"), "local", pk("zone"), "z1", pk("node"), "n1")}
	nodeTerm := func(n, z string) *csi.Topology {
		return topo(pk("cluster"), "local", pk("zone"), z, pk("node"), n)
	}
	pinN1 := topos(topo(pk("node"), "n1"))
	allNodes := topos(nodeTerm("n0", "z0"), nodeTerm("n1", "z1"), nodeTerm("n2", "z2"))

	type tc struct {
		name                 string
		host                 Host
		requisite, preferred []*csi.Topology
		want                 []*csi.Topology
		code                 codes.Code
		msg                  []string // parts of the message
	}
	cases := []tc{
		{name: "no requirements (Immediate, --immediate-topology=false)", host: n1, want: pinN1},
		{name: "Immediate, --immediate-topology=true: one term per node", host: n1,
			requisite: allNodes, preferred: rotate(allNodes, 2), want: pinN1},
		{name: "allowedTopologies z1, z2 (flattened)", host: n1,
			requisite: topos(zoneTerm("z1"), zoneTerm("z2")), want: pinN1},
		{name: "allowedTopologies on a verbatim key the node does not report", host: n1,
			requisite: topos(topo("topology.kubernetes.io/zone", "z1")), code: codes.ResourceExhausted,
			msg: []string{`connection "local"`, `node "n1"`, "topology.kubernetes.io/zone=z1", "does not admit"}},
		{name: "allowedTopologies z2 only", host: n1,
			requisite: topos(zoneTerm("z2")), code: codes.ResourceExhausted,
			msg: []string{`connection "local"`, `node "n1"`, pk("zone") + "=z2", "(requisite) does not admit", pk("zone") + "=z1"}},
		{name: "strict WaitForFirstConsumer, selected node is this one", host: n1,
			requisite: topos(nodeTerm("n1", "z1")), preferred: topos(nodeTerm("n1", "z1")), want: pinN1},
		{name: "strict WaitForFirstConsumer, selected node is another one", host: n1,
			requisite: topos(nodeTerm("n2", "z2")), preferred: topos(nodeTerm("n2", "z2")), code: codes.ResourceExhausted,
			msg: []string{`connection "local"`, `this controller runs on node "n1"`, `asked for node "n2"`, `the controller on node "n2" must create it`}},
		{name: "preferred only, naming this node", host: n1, preferred: topos(nodeTerm("n1", "z1")), want: pinN1},
		{name: "preferred only, naming another node", host: n1, preferred: topos(nodeTerm("n2", "z1")), code: codes.ResourceExhausted,
			msg: []string{`asked for node "n2"`}},
		{name: "controller-only process: known by name, no segments; its node asked", host: Host{Name: "n1"},
			requisite: topos(topo(pk("node"), "n1")), want: pinN1},
		{name: "controller-only process: a zone term cannot be proven", host: Host{Name: "n1"},
			requisite: topos(zoneTerm("z1")), code: codes.ResourceExhausted,
			msg: []string{`node "n1" is known here by name only`}},
		{name: "no node name", host: Host{}, code: codes.FailedPrecondition,
			msg: []string{`connection "local"`, "--node-id"}},
	}
	for _, typ := range []Options{clusterOpts, zoneOpts, nodeOpts} {
		for _, c := range cases {
			t.Run(typ.Type+"/"+c.name, func(t *testing.T) {
				d, err := typ.DecideNodeLocal("local", c.host, c.requisite, c.preferred)
				if c.code != codes.OK {
					if status.Code(err) != c.code {
						t.Fatalf("code %s, want %s (err %v, topologies %v)", status.Code(err), c.code, err, d.Topologies())
					}
					for _, m := range c.msg {
						if !strings.Contains(status.Convert(err).Message(), m) {
							t.Errorf("message %q lacks %q", status.Convert(err).Message(), m)
						}
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(c.want, d.Topologies(), protocmp.Transform()); diff != "" {
					t.Errorf("accessible_topology (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestAdmitsHost: GetCapacity of a node-local connection is its own
// node's: a topology another node reports gets 0.
func TestAdmitsHost(t *testing.T) {
	n1 := Host{Name: "n1", Segments: kvs(pk("zone"), "z1", pk("node"), "n1")}
	for _, c := range []struct {
		name string
		topo *csi.Topology
		want bool
	}{
		{"no topology", nil, true},
		{"own node", topo(pk("zone"), "z1", pk("node"), "n1"), true},
		{"own zone", zoneTerm("z1"), true},
		{"another node", topo(pk("zone"), "z1", pk("node"), "n2"), false},
		{"another zone", zoneTerm("z2"), false},
		{"a key the node does not report", topo("topology.kubernetes.io/zone", "z1"), false},
	} {
		if got := zoneOpts.AdmitsHost(n1, c.topo); got != c.want {
			t.Errorf("%s: AdmitsHost = %v, want %v", c.name, got, c.want)
		}
	}
}

// A shared local-hostpath base path declares its topology, and is decided
// by the connection's list like any storage: never pinned to a node. (The
// node-local rule is chosen by the caller, connection.IsNodeLocal; this
// pins the list's side under type node, where the node key is in every
// strict term.)
func TestDeclaredTopologyIsNotPinned(t *testing.T) {
	c := Compile([]Entry{zoneEntry("z1")}, nodeOpts)
	term := topo(pk("zone"), "z1", pk("node"), "n2")
	d, err := c.Decide("shared", topos(term), topos(term))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(topos(zoneTerm("z1")), d.Topologies(), protocmp.Transform()); diff != "" {
		t.Errorf("accessible_topology (-want +got):\n%s", diff)
	}
}

// TestDecideNodeLocalNodeNameNoLabelValue: a node name of 93 bytes (a
// real cloud name with a long domain) is no label value, so no node could
// carry the pin: CreateVolume is FAILED_PRECONDITION naming the
// connection, the name and why, never a pin; a name of 63 bytes is pinned.
func TestDecideNodeLocalNodeNameNoLabelValue(t *testing.T) {
	o := Options{Prefix: "p.example.com", Type: "zone"}
	long := "ip-10-200-30-40." + strings.Repeat("x", 60) + ".compute.internal"
	_, err := o.DecideNodeLocal("disk", Host{Name: long}, nil, nil)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `connection "disk" is node-local`) ||
		!strings.Contains(err.Error(), `node name "`+long+`" (93 bytes) is not a valid label value (must be no more than 63 bytes)`) {
		t.Errorf("93-byte node name: %v", err)
	}
	ok := strings.Repeat("n", 63)
	d, err := o.DecideNodeLocal("disk", Host{Name: ok}, nil, nil)
	if err != nil || len(d.Topologies()) != 1 || d.Topologies()[0].GetSegments()["p.example.com/node"] != ok {
		t.Errorf("63-byte node name: %v, %v", d.Topologies(), err)
	}
}
