package csi_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
)

// startNodeLocal serves a proxy on node "node-1" of zone z1 (as a node
// plugin that also serves the controller: it knows its segments) with the
// node topology type typ, and two built-in local-hostpath connections:
// "disk", node-local (no topology), and "shared", a base path declared
// reachable from zone z1.
func startNodeLocal(t *testing.T, typ string) *testProxy {
	t.Helper()
	opts := accessible.Options{Prefix: testPrefix, Type: typ}
	segments := map[string]string{testPrefix + "/zone": "z1", testPrefix + "/node": "node-1"}
	p := startProxyStore(t, func(o *connection.Options) {
		o.Topology = opts
	}, func(o *pcsi.Options) {
		o.Topology, o.NodeSegments = opts, segments
	})
	p.write(t, "disk", fmt.Sprintf("driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\n", t.TempDir()))
	p.write(t, "shared", fmt.Sprintf("driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\nproxy:\n  perDriver:\n    topology:\n    - requirements: {zone: z1}\n", t.TempDir()))
	return p
}

// TestNodeLocalCreateVolume (SPEC §12): in every node topology type, a
// node-local connection's volume is pinned to the node whose controller
// made it, whatever the request shape of the three StorageClass modes;
// ControllerGetVolume and ListVolumes report the same pin; a request for
// another node is RESOURCE_EXHAUSTED naming the connection and the node; a
// shared base path declared with topology is not pinned.
func TestNodeLocalCreateVolume(t *testing.T) {
	nodeKey := testPrefix + "/node"
	zoneKey := testPrefix + "/zone"
	pin := []*csi.Topology{topo(nodeKey, "node-1")}
	strict := func(node, zone string) *csi.TopologyRequirement {
		term := topo(zoneKey, zone, nodeKey, node)
		return &csi.TopologyRequirement{Requisite: []*csi.Topology{term}, Preferred: []*csi.Topology{term}}
	}
	for _, typ := range []string{"cluster", "zone", "node"} {
		t.Run(typ, func(t *testing.T) {
			p := startNodeLocal(t, typ)
			for i, tc := range []struct {
				name, conn string
				req        *csi.TopologyRequirement
				want       []*csi.Topology
				code       codes.Code
				msg        []string
			}{
				{name: "no requirement", conn: "disk", want: pin},
				{name: "allowedTopologies z1, z2", conn: "disk", want: pin,
					req: &csi.TopologyRequirement{Requisite: []*csi.Topology{topo(zoneKey, "z1"), topo(zoneKey, "z2")}}},
				{name: "Immediate, one term per node", conn: "disk", want: pin,
					req: &csi.TopologyRequirement{Requisite: []*csi.Topology{topo(zoneKey, "z0", nodeKey, "node-0"), topo(zoneKey, "z1", nodeKey, "node-1")},
						Preferred: []*csi.Topology{topo(zoneKey, "z0", nodeKey, "node-0"), topo(zoneKey, "z1", nodeKey, "node-1")}}},
				{name: "strict, this node", conn: "disk", req: strict("node-1", "z1"), want: pin},
				{name: "strict, another node", conn: "disk", req: strict("node-2", "z1"), code: codes.ResourceExhausted,
					msg: []string{`connection "disk"`, `this controller runs on node "node-1"`, `asked for node "node-2"`}},
				{name: "allowedTopologies z2 only", conn: "disk", code: codes.ResourceExhausted,
					req: &csi.TopologyRequirement{Requisite: []*csi.Topology{topo(zoneKey, "z2")}},
					msg: []string{`connection "disk"`, `node "node-1"`, zoneKey + "=z2"}},
				{name: "shared, no requirement", conn: "shared", want: []*csi.Topology{topo(zoneKey, "z1")}},
				{name: "shared, strict on another node of its zone", conn: "shared", req: strict("node-2", "z1"),
					want: []*csi.Topology{topo(zoneKey, "z1")}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					resp, err := p.Controller.CreateVolume(callCtx(t), &csi.CreateVolumeRequest{
						Name: fmt.Sprintf("pvc-%s-%d", typ, i), Parameters: map[string]string{"connection": tc.conn},
						VolumeCapabilities: []*csi.VolumeCapability{testkit.RWO()}, AccessibilityRequirements: tc.req,
					})
					if tc.code != codes.OK {
						testkit.WantCode(t, err, tc.code, tc.msg...)
						return
					}
					if err != nil {
						t.Fatal(err)
					}
					if d := diff(tc.want, resp.GetVolume().GetAccessibleTopology()); d != "" {
						t.Errorf("CreateVolume accessible_topology (-want +got):\n%s", d)
					}
					id := resp.GetVolume().GetVolumeId()
					got, err := p.Controller.ControllerGetVolume(callCtx(t), &csi.ControllerGetVolumeRequest{VolumeId: id})
					if err != nil {
						t.Fatal(err)
					}
					if d := diff(tc.want, got.GetVolume().GetAccessibleTopology()); d != "" {
						t.Errorf("ControllerGetVolume accessible_topology (-want +got):\n%s", d)
					}
					list, err := p.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{})
					if err != nil {
						t.Fatal(err)
					}
					found := false
					for _, e := range list.GetEntries() {
						if e.GetVolume().GetVolumeId() == id {
							found = true
							if d := diff(tc.want, e.GetVolume().GetAccessibleTopology()); d != "" {
								t.Errorf("ListVolumes accessible_topology (-want +got):\n%s", d)
							}
						}
					}
					if !found {
						t.Errorf("ListVolumes lacks %s", id)
					}
				})
			}
		})
	}
}

// TestNodeLocalCapacity: GetCapacity of a node-local connection for a
// topology its node does not carry is 0, so capacity tracking steers
// WaitForFirstConsumer claims to the node that can hold them.
func TestNodeLocalCapacity(t *testing.T) {
	p := startNodeLocal(t, "zone")
	nodeKey, zoneKey := testPrefix+"/node", testPrefix+"/zone"
	for _, tc := range []struct {
		name string
		topo *csi.Topology
		zero bool
	}{
		{"this node", topo(zoneKey, "z1", nodeKey, "node-1"), false},
		{"another node", topo(zoneKey, "z1", nodeKey, "node-2"), true},
		{"another zone", topo(zoneKey, "z2"), true},
	} {
		resp, err := p.Controller.GetCapacity(callCtx(t), &csi.GetCapacityRequest{
			Parameters: map[string]string{"connection": "disk"}, AccessibleTopology: tc.topo,
			VolumeCapabilities: []*csi.VolumeCapability{testkit.RWO()},
		})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := resp.GetAvailableCapacity(); (got == 0) != tc.zero || got == math.MinInt64 {
			t.Errorf("%s: capacity %d, want zero=%v", tc.name, got, tc.zero)
		}
	}
}

// TestGroupNodeLocalMember: a node-local member of a group admits only
// the node whose controller serves the call (Placement.Admits), not every
// term as a member without topology would, so a claim for another zone
// goes past it to the member that serves that zone, and a claim no member
// admits is refused with what each offers. The topology dry run predicts
// the same (cmd/proxy-topology TestTopologyGroupNodeLocal).
func TestGroupNodeLocalMember(t *testing.T) {
	nodeKey, zoneKey := testPrefix+"/node", testPrefix+"/zone"
	p := startNodeLocal(t, "zone")
	p.write(t, "zone2", fmt.Sprintf("driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\nproxy:\n  perDriver:\n    topology:\n    - requirements: {zone: z2}\n", t.TempDir()))
	p.write(t, "mixed", "driver: group\ngroup:\n  members: [disk, zone2]\n")
	for i, tc := range []struct {
		name   string
		req    *csi.TopologyRequirement
		member string
		want   []*csi.Topology
		msg    []string
	}{
		{name: "this node's zone", member: "disk", want: []*csi.Topology{topo(nodeKey, "node-1")},
			req: &csi.TopologyRequirement{Requisite: []*csi.Topology{topo(zoneKey, "z1")}}},
		{name: "another zone", member: "zone2", want: []*csi.Topology{topo(zoneKey, "z2")},
			req: &csi.TopologyRequirement{Requisite: []*csi.Topology{topo(zoneKey, "z2")}}},
		{name: "another node", req: &csi.TopologyRequirement{Requisite: []*csi.Topology{topo(zoneKey, "z1", nodeKey, "node-2")}},
			msg: []string{`group "mixed"`, `member "disk" offers node "node-1" only (node-local)`, `member "zone2" offers [{` + zoneKey + `=z2}]`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := p.Controller.CreateVolume(callCtx(t), &csi.CreateVolumeRequest{
				Name: fmt.Sprintf("pvc-mixed-%d", i), Parameters: map[string]string{"connection": "mixed"},
				VolumeCapabilities: []*csi.VolumeCapability{testkit.RWO()}, AccessibilityRequirements: tc.req,
			})
			if tc.member == "" {
				testkit.WantCode(t, err, codes.ResourceExhausted, tc.msg...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if id := resp.GetVolume().GetVolumeId(); !strings.HasPrefix(id, "v:"+tc.member+"/") {
				t.Errorf("volume id %q, want one of member %q", id, tc.member)
			}
			if d := diff(tc.want, resp.GetVolume().GetAccessibleTopology()); d != "" {
				t.Errorf("accessible_topology (-want +got):\n%s", d)
			}
		})
	}
}
