package csi_test

import (
	"math"
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

// groupProxy is a proxy with members a (z1, capacity 10), b (z1 and z2,
// capacity 20) and c (z3, no GET_CAPACITY), and the group g of the three.
func groupProxy(t *testing.T) (*testProxy, map[string]*fakeUpstream) {
	t.Helper()
	p := startProxy(t)
	withCap := withControllerCaps(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, csi.ControllerServiceCapability_RPC_GET_CAPACITY,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES, csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT, csi.ControllerServiceCapability_RPC_CLONE_VOLUME)
	noCap := withControllerCaps(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, csi.ControllerServiceCapability_RPC_LIST_VOLUMES)
	fakes := map[string]*fakeUpstream{"a": newFakeUpstream(t, withCap), "b": newFakeUpstream(t, withCap), "c": newFakeUpstream(t, noCap)}
	fakes["a"].setResponse("GetCapacity", &csi.GetCapacityResponse{AvailableCapacity: 10})
	fakes["b"].setResponse("GetCapacity", &csi.GetCapacityResponse{AvailableCapacity: 20})
	p.add(t, "a", conn{Endpoint: fakes["a"].Endpoint, Topology: zoneEntries("z1"), Parameters: map[string]string{"tier": "a"}})
	p.add(t, "b", conn{Endpoint: fakes["b"].Endpoint, Topology: append(zoneEntries("z1"), zoneEntries("z2")...)})
	p.add(t, "c", conn{Endpoint: fakes["c"].Endpoint, Topology: zoneEntries("z3")})
	p.write(t, "g", "driver: group\ngroup:\n  members: [a, b, c]\n")
	return p, fakes
}

// TestGroupCapacity: GetCapacity on a group is the sum of the members that
// admit the segment; 0 when none does; a member without GET_CAPACITY is
// unlimited, and so is the sum.
func TestGroupCapacity(t *testing.T) {
	zone := testPrefix + "/zone"
	p, fakes := groupProxy(t)
	fakes["big"] = newFakeUpstream(t, withControllerCaps(csi.ControllerServiceCapability_RPC_GET_CAPACITY))
	fakes["big"].setResponse("GetCapacity", &csi.GetCapacityResponse{AvailableCapacity: math.MaxInt64 - 5})
	p.add(t, "big", conn{Endpoint: fakes["big"].Endpoint, Topology: zoneEntries("z1")})
	p.write(t, "g-big", "driver: group\ngroup:\n  members: [big, a]\n")
	for _, tt := range []struct {
		name, conn string
		segment    *csi.Topology
		want       int64
		asked      []string
	}{
		{name: "z1: a and b", conn: "g", segment: topo(zone, "z1"), want: 30, asked: []string{"a", "b"}},
		{name: "z2: b", conn: "g", segment: topo(zone, "z2"), want: 20, asked: []string{"b"}},
		{name: "z3: c, unlimited", conn: "g", segment: topo(zone, "z3"), want: math.MaxInt64},
		{name: "z4: none", conn: "g", segment: topo(zone, "z4"), want: 0},
		{name: "no segment: all", conn: "g", want: math.MaxInt64, asked: []string{"a", "b"}},
		{name: "saturated", conn: "g-big", segment: topo(zone, "z1"), want: math.MaxInt64, asked: []string{"a", "big"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := map[string]int{}
			for n, f := range fakes {
				before[n] = len(f.requests("GetCapacity"))
			}
			resp, err := p.Controller.GetCapacity(callCtx(t), &csi.GetCapacityRequest{
				Parameters: map[string]string{"connection": tt.conn}, AccessibleTopology: tt.segment,
				VolumeCapabilities: []*csi.VolumeCapability{testkit.RWO()},
			})
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetAvailableCapacity() != tt.want {
				t.Errorf("available_capacity = %d, want %d", resp.GetAvailableCapacity(), tt.want)
			}
			var asked []string
			for _, n := range []string{"a", "b", "big", "c"} {
				if len(fakes[n].requests("GetCapacity")) > before[n] {
					asked = append(asked, n)
				}
			}
			if strings.Join(asked, ",") != strings.Join(tt.asked, ",") {
				t.Errorf("upstreams asked %v, want %v", asked, tt.asked)
			}
		})
	}
}

// TestGroupCreateVolume: the chosen member's upstream gets the call, as
// for a connection named directly: its parameter defaults, no
// `connection`, no requirements; the ID names the member.
func TestGroupCreateVolume(t *testing.T) {
	zone := testPrefix + "/zone"
	p, fakes := groupProxy(t)
	for _, tt := range []struct {
		name                 string
		requisite, preferred []*csi.Topology
		member               string
		topology             []*csi.Topology
	}{
		{name: "strict z2", requisite: []*csi.Topology{topo(zone, "z2")}, preferred: []*csi.Topology{topo(zone, "z2")}, member: "b",
			topology: []*csi.Topology{topo(zone, "z2")}},
		{name: "strict z1", requisite: []*csi.Topology{topo(zone, "z1")}, preferred: []*csi.Topology{topo(zone, "z1")}, member: "a",
			topology: []*csi.Topology{topo(zone, "z1")}},
		{name: "immediate preferring z3", member: "c", topology: []*csi.Topology{topo(zone, "z3")},
			requisite: []*csi.Topology{topo(zone, "z1"), topo(zone, "z2"), topo(zone, "z3")},
			preferred: []*csi.Topology{topo(zone, "z3"), topo(zone, "z1"), topo(zone, "z2")}},
		{name: "no requirements", member: "a", topology: []*csi.Topology{topo(zone, "z1")}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			name := "pvc-" + strings.ReplaceAll(tt.name, " ", "-")
			var req *csi.TopologyRequirement
			if tt.requisite != nil {
				req = &csi.TopologyRequirement{Requisite: tt.requisite, Preferred: tt.preferred}
			}
			resp, err := p.Controller.CreateVolume(callCtx(t), &csi.CreateVolumeRequest{
				Name: name, VolumeCapabilities: []*csi.VolumeCapability{testkit.RWO()},
				Parameters: map[string]string{"connection": "g", "fs": "xfs"}, AccessibilityRequirements: req,
			})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := resp.GetVolume().GetVolumeId(), "v:"+tt.member+"/vol-"+name; got != want {
				t.Errorf("volume_id %s, want %s", got, want)
			}
			if d := diff(tt.topology, resp.GetVolume().GetAccessibleTopology()); d != "" {
				t.Errorf("accessible_topology (-want +got):\n%s", d)
			}
			var sent *csi.CreateVolumeRequest
			for n, f := range fakes {
				for _, r := range f.requests("CreateVolume") {
					if r.(*csi.CreateVolumeRequest).GetName() == name {
						if n != tt.member || sent != nil {
							t.Errorf("CreateVolume reached %s", n)
						}
						sent = r.(*csi.CreateVolumeRequest)
					}
				}
			}
			if sent == nil {
				t.Fatal("no upstream got the CreateVolume")
			}
			if _, ok := sent.GetParameters()["connection"]; ok || sent.GetParameters()["fs"] != "xfs" || sent.GetAccessibilityRequirements() != nil {
				t.Errorf("upstream request: parameters %v, requirements %v", sent.GetParameters(), sent.GetAccessibilityRequirements())
			}
			if tt.member == "a" && sent.GetParameters()["tier"] != "a" {
				t.Errorf("member a's parameter defaults not applied: %v", sent.GetParameters())
			}
		})
	}
}

// TestGroupErrors: what a group refuses, each with the code and what the
// message must name.
func TestGroupErrors(t *testing.T) {
	zone := testPrefix + "/zone"
	p, _ := groupProxy(t)
	p.write(t, "g-missing", "driver: group\ngroup:\n  members: [a, gone]\n")
	p.write(t, "g-nested", "driver: group\ngroup:\n  members: [g]\n")
	p.write(t, "g-broken", "driver: group\ngroup:\n  members: [a]\ncsi:\n  endpoint: unix:///x.sock\n")
	strict := func(z string) *csi.TopologyRequirement {
		return &csi.TopologyRequirement{Requisite: []*csi.Topology{topo(zone, z)}, Preferred: []*csi.Topology{topo(zone, z)}}
	}
	create := func(conn string, req *csi.TopologyRequirement, src *csi.VolumeContentSource) error {
		_, err := p.Controller.CreateVolume(callCtx(t), &csi.CreateVolumeRequest{
			Name: "pvc-x", VolumeCapabilities: []*csi.VolumeCapability{testkit.RWO()},
			Parameters: map[string]string{"connection": conn}, AccessibilityRequirements: req, VolumeContentSource: src,
		})
		return err
	}
	snapshot := func(id string) *csi.VolumeContentSource {
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: id}}}
	}
	volume := func(id string) *csi.VolumeContentSource {
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}}
	}
	t.Run("no member admits", func(t *testing.T) {
		testkit.WantCode(t, create("g", strict("z9"), nil), codes.ResourceExhausted,
			`for any member of group "g"`, `member "a" offers [{`+zone+`=z1}]`, `member "b" offers [{`+zone+`=z1}, {`+zone+`=z2}]`, `member "c" offers [{`+zone+`=z3}]`)
	})
	t.Run("missing member, needed", func(t *testing.T) {
		testkit.WantCode(t, create("g-missing", strict("z2"), nil), codes.FailedPrecondition, `group "g-missing": member "gone" (group.members[1])`)
	})
	t.Run("missing member, not needed", func(t *testing.T) {
		if err := create("g-missing", strict("z1"), nil); err != nil {
			t.Errorf("z1 is decided by member a: %v", err)
		}
	})
	t.Run("member is a group", func(t *testing.T) {
		testkit.WantCode(t, create("g-nested", nil, nil), codes.FailedPrecondition, `member "g" (group.members[0]) is itself a group`)
		_, err := p.Controller.GetCapacity(callCtx(t), &csi.GetCapacityRequest{Parameters: map[string]string{"connection": "g-nested"}})
		testkit.WantCode(t, err, codes.FailedPrecondition, `member "g" (group.members[0]) is itself a group`)
	})
	t.Run("broken group file", func(t *testing.T) {
		testkit.WantCode(t, create("g-broken", nil, nil), codes.FailedPrecondition, "g-broken.yaml", "csi: not a key of a group file")
		if err := create("g", nil, nil); err != nil {
			t.Errorf("another group beside the broken one: %v", err)
		}
		// A file that does not load fails listings, whatever it would
		// hold (docs/operations.md, "Listings").
		_, err := p.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{})
		testkit.WantCode(t, err, codes.FailedPrecondition, `ListVolumes: connection "g-broken" does not load`, "g-broken.yaml")
		p.remove(t, "g-broken")
	})
	t.Run("restore from a member", func(t *testing.T) {
		if err := create("g", strict("z2"), snapshot("s:b/snap-1")); err != nil {
			t.Errorf("restore in z2 from b's snapshot: %v", err)
		}
		testkit.WantCode(t, create("g", strict("z3"), snapshot("s:b/snap-1")), codes.ResourceExhausted,
			`group "g": the source snapshot is on member "b"`, `for connection "b" (it offers`)
		testkit.WantCode(t, create("g", strict("z1"), volume("v:c/vol-1")), codes.ResourceExhausted, `the source volume is on member "c"`)
	})
	t.Run("source outside the group", func(t *testing.T) {
		p.add(t, "other", conn{Endpoint: "unix:///nonexistent.sock"})
		testkit.WantCode(t, create("g", nil, snapshot("s:other/snap-1")), codes.InvalidArgument, `snapshot of connection "other": it is not one of the group's members`)
		testkit.WantCode(t, create("g", nil, snapshot("garbage")), codes.NotFound, "volume_content_source.snapshot.snapshot_id")
		p.remove(t, "other")
	})
	t.Run("an ID naming a group", func(t *testing.T) {
		_, err := p.Controller.DeleteVolume(callCtx(t), &csi.DeleteVolumeRequest{VolumeId: "v:g/vol-1"})
		testkit.WantCode(t, err, codes.FailedPrecondition, `connection "g" is a group (members ["a" "b" "c"])`)
		_, err = p.Controller.ControllerGetVolume(callCtx(t), &csi.ControllerGetVolumeRequest{VolumeId: "v:g/vol-1"})
		testkit.WantCode(t, err, codes.FailedPrecondition, `connection "g" is a group`)
		_, err = p.Node.NodeUnpublishVolume(callCtx(t), &csi.NodeUnpublishVolumeRequest{VolumeId: "v:g/vol-1", TargetPath: "/x"})
		testkit.WantCode(t, err, codes.FailedPrecondition, `connection "g" is a group`)
		_, err = p.Controller.ListSnapshots(callCtx(t), &csi.ListSnapshotsRequest{SourceVolumeId: "v:g/vol-1"})
		testkit.WantCode(t, err, codes.FailedPrecondition, `connection "g" is a group`)
	})
	t.Run("listings skip groups", func(t *testing.T) {
		resp, err := p.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range resp.GetEntries() {
			if id := e.GetVolume().GetVolumeId(); strings.HasPrefix(id, "v:g") {
				t.Errorf("listed under a group: %s", id)
			}
		}
	})
}
