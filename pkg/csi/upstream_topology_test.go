package csi_test

import (
	"fmt"
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
)

const (
	fakeZoneKey = "fake.example.com/zone"
	fakeNodeKey = "fake.example.com/node"
)

// createAndCheck serves a fake upstream whose CreateVolume answers
// answer, behind connection "up" with upstreamTopology m (and topology
// entries), creates a volume with requirement req through the proxy, and
// checks its accessible_topology (want) or its refusal (code, msg). It
// returns the fake, to look at what it was asked.
func createAndCheck(t *testing.T, m map[string]string, entries []accessible.Entry, answer []*csi.Topology,
	req *csi.TopologyRequirement, want []*csi.Topology, code codes.Code, msg []string) *fakeUpstream {
	t.Helper()
	f := newFakeUpstream(t)
	f.setResponse("CreateVolume", &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: "vol-1", AccessibleTopology: answer}})
	p := startProxy(t)
	p.add(t, "up", conn{Endpoint: f.Endpoint, Topology: entries, UpstreamTopology: m})
	create := createReq("pvc-1", map[string]string{"connection": "up"})
	create.AccessibilityRequirements = req
	resp, err := p.Controller.CreateVolume(callCtx(t), create)
	if code != codes.OK {
		testkit.WantCode(t, err, code, msg...)
	} else if err != nil {
		t.Fatal(err)
	} else if d := diff(want, resp.GetVolume().GetAccessibleTopology()); d != "" {
		t.Errorf("accessible_topology (-want +got):\n%s", d)
	}
	return f
}

// TestUpstreamTopologyZonal (SPEC §13): a zonal upstream answering in its
// own key gives a volume in the proxy's key (with the declared entry's
// extra labels), and receives the claim's requirements in its key; an
// answer the requisite does not admit, an unmapped key and a value that is
// no label value are FAILED_PRECONDITION after the upstream volume is
// deleted; GetCapacity's segment goes upstream translated too.
func TestUpstreamTopologyZonal(t *testing.T) {
	zone := testPrefix + "/zone"
	zonal := map[string]string{fakeZoneKey: "zone"}
	declared := []accessible.Entry{
		{Requirements: map[string]string{"zone": "z1"}},
		{Requirements: map[string]string{"zone": "z2"}, Extra: map[string]string{"example.com/tier": "fast"}},
	}
	for _, tc := range []struct {
		name     string
		entries  []accessible.Entry
		answer   []*csi.Topology
		req      *csi.TopologyRequirement
		wantUp   *csi.TopologyRequirement
		want     []*csi.Topology
		code     codes.Code
		msg      []string
		deleted  bool
		notAsked bool
	}{
		{name: "the claim's zone, translated both ways", answer: []*csi.Topology{topo(fakeZoneKey, "z2")},
			req:    &csi.TopologyRequirement{Requisite: []*csi.Topology{topo(zone, "z2")}, Preferred: []*csi.Topology{topo(zone, "z2")}},
			wantUp: &csi.TopologyRequirement{Requisite: []*csi.Topology{topo(fakeZoneKey, "z2")}, Preferred: []*csi.Topology{topo(fakeZoneKey, "z2")}},
			want:   []*csi.Topology{topo(zone, "z2")}},
		{name: "no requirements", answer: []*csi.Topology{topo(fakeZoneKey, "z2")}, want: []*csi.Topology{topo(zone, "z2")}},
		{name: "declared topology: extra where the entry matches", entries: declared, answer: []*csi.Topology{topo(fakeZoneKey, "z2")},
			req:    &csi.TopologyRequirement{Requisite: []*csi.Topology{topo(zone, "z1"), topo(zone, "z2")}},
			wantUp: &csi.TopologyRequirement{Requisite: []*csi.Topology{topo(fakeZoneKey, "z1"), topo(fakeZoneKey, "z2")}},
			want:   []*csi.Topology{topo(zone, "z2", "example.com/tier", "fast")}},
		{name: "declared topology: the claim's zone is not offered", entries: declared,
			req:  &csi.TopologyRequirement{Requisite: []*csi.Topology{topo(zone, "z3")}},
			code: codes.ResourceExhausted, msg: []string{`connection "up"`, zone + "=z3"}, notAsked: true},
		{name: "declared topology: the answer lies outside it", entries: declared, answer: []*csi.Topology{topo(fakeZoneKey, "z3")},
			code: codes.FailedPrecondition, deleted: true,
			msg: []string{`connection "up"`, "accessible_topology[0] {" + fakeZoneKey + "=z3}", "outside what proxy.perDriver.topology declares", "the upstream object was deleted"}},
		{name: "an answer the requisite does not admit", answer: []*csi.Topology{topo(fakeZoneKey, "z1")},
			req:  &csi.TopologyRequirement{Requisite: []*csi.Topology{topo(zone, "z2")}},
			code: codes.FailedPrecondition, deleted: true, wantUp: &csi.TopologyRequirement{Requisite: []*csi.Topology{topo(fakeZoneKey, "z2")}},
			msg: []string{"{" + fakeZoneKey + "=z1}", "requisite [{" + zone + "=z2}]", "the upstream object was deleted"}},
		{name: "an unmapped key", answer: []*csi.Topology{topo(fakeZoneKey, "z2", "fake.example.com/rack", "r7")},
			code: codes.FailedPrecondition, deleted: true,
			msg: []string{`key "fake.example.com/rack"`, "proxy.perDriver.upstreamTopology does not map", "the upstream object was deleted"}},
		{name: "a value that is no label value", answer: []*csi.Topology{topo(fakeZoneKey, "zone two")},
			code: codes.FailedPrecondition, deleted: true, msg: []string{`value "zone two"`, "not a valid label value"}},
		{name: "an empty term, no topology list", answer: []*csi.Topology{{}},
			code: codes.FailedPrecondition, deleted: true, msg: []string{`connection "up"`, "the upstream answered an empty term", "the upstream object was deleted"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := createAndCheck(t, zonal, tc.entries, tc.answer, tc.req, tc.want, tc.code, tc.msg)
			creates := f.requests("CreateVolume")
			if tc.notAsked {
				if len(creates) != 0 {
					t.Errorf("upstream asked to create %v, want not asked", creates)
				}
				return
			}
			if len(creates) != 1 {
				t.Fatalf("upstream CreateVolume requests %v, want one", creates)
			}
			var wantUp proto.Message = tc.wantUp
			if tc.wantUp == nil {
				wantUp = (*csi.TopologyRequirement)(nil)
			}
			if d := diff(wantUp, creates[0].(*csi.CreateVolumeRequest).GetAccessibilityRequirements()); d != "" {
				t.Errorf("requirements sent upstream (-want +got):\n%s", d)
			}
			if deletes := f.requests("DeleteVolume"); (len(deletes) == 1) != tc.deleted || len(deletes) > 1 {
				t.Errorf("DeleteVolume requests %v, want deleted: %v", deletes, tc.deleted)
			}
		})
	}

	t.Run("GetCapacity", func(t *testing.T) {
		f := newFakeUpstream(t, withControllerCaps(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, csi.ControllerServiceCapability_RPC_GET_CAPACITY))
		p := startProxy(t)
		p.add(t, "up", conn{Endpoint: f.Endpoint, UpstreamTopology: zonal})
		if _, err := p.Controller.GetCapacity(callCtx(t), &csi.GetCapacityRequest{
			Parameters: map[string]string{"connection": "up"}, AccessibleTopology: topo(zone, "z2", "kubernetes.io/hostname", "n1"),
		}); err != nil {
			t.Fatal(err)
		}
		got := f.requests("GetCapacity")
		if len(got) != 1 {
			t.Fatalf("upstream GetCapacity requests %v, want one", got)
		}
		if d := diff(topo(fakeZoneKey, "z2"), got[0].(*csi.GetCapacityRequest).GetAccessibleTopology()); d != "" {
			t.Errorf("segment sent upstream (-want +got):\n%s", d)
		}
	})

	t.Run("existing volumes report the upstream's answer translated", func(t *testing.T) {
		f := newFakeUpstream(t)
		p := startProxy(t)
		p.add(t, "up", conn{Endpoint: f.Endpoint, UpstreamTopology: map[string]string{"upstream.example.com/rack": "rack"}})
		got, err := p.Controller.ControllerGetVolume(callCtx(t), &csi.ControllerGetVolumeRequest{VolumeId: "v:up/vol-1"})
		if err != nil {
			t.Fatal(err)
		}
		if d := diff([]*csi.Topology{topo(testPrefix+"/rack", "r7")}, got.GetVolume().GetAccessibleTopology()); d != "" {
			t.Errorf("ControllerGetVolume accessible_topology (-want +got):\n%s", d)
		}
	})
}

// TestExistingUntranslatable (SPEC §8, §13): an existing volume whose
// upstream answer does not translate (the fake reports an unmapped rack
// key) is never reported wider than it is: a node-local connection
// reports its node, one with a topology list that list, and a mapped
// connection with neither fails ControllerGetVolume and ListVolumes with
// FAILED_PRECONDITION naming the connection and the volume.
func TestExistingUntranslatable(t *testing.T) {
	caps := withControllerCaps(csi.ControllerServiceCapability_RPC_GET_VOLUME, csi.ControllerServiceCapability_RPC_LIST_VOLUMES)
	for _, tc := range []struct {
		name    string
		m       map[string]string
		entries []accessible.Entry
		want    []*csi.Topology
	}{
		{name: "node-local: the node", m: map[string]string{fakeNodeKey: "node"}, want: []*csi.Topology{topo(testPrefix+"/node", "node-1")}},
		{name: "zonal with a list: the list", m: map[string]string{fakeZoneKey: "zone"}, entries: zoneEntries("z2"),
			want: []*csi.Topology{topo(testPrefix+"/zone", "z2")}},
		{name: "zonal without a list: refused", m: map[string]string{fakeZoneKey: "zone"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeUpstream(t, caps, withVolumes("vol-1"))
			p := startProxy(t)
			p.add(t, "up", conn{Endpoint: f.Endpoint, Topology: tc.entries, UpstreamTopology: tc.m})
			got, err := p.Controller.ControllerGetVolume(callCtx(t), &csi.ControllerGetVolumeRequest{VolumeId: "v:up/vol-1"})
			list, lerr := p.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{})
			if tc.want == nil {
				testkit.WantCode(t, err, codes.FailedPrecondition, `connection "up"`, `volume "v:up/vol-1"`, `key "upstream.example.com/rack"`, "declares no proxy.perDriver.topology")
				testkit.WantCode(t, lerr, codes.FailedPrecondition, `connection "up"`, `volume "v:up/vol-1"`)
				return
			}
			if err != nil || lerr != nil {
				t.Fatalf("ControllerGetVolume: %v; ListVolumes: %v", err, lerr)
			}
			if d := diff(tc.want, got.GetVolume().GetAccessibleTopology()); d != "" {
				t.Errorf("ControllerGetVolume accessible_topology (-want +got):\n%s", d)
			}
			if len(list.GetEntries()) != 1 {
				t.Fatalf("ListVolumes entries %v, want one", list.GetEntries())
			}
			if d := diff(tc.want, list.GetEntries()[0].GetVolume().GetAccessibleTopology()); d != "" {
				t.Errorf("ListVolumes accessible_topology (-want +got):\n%s", d)
			}
		})
	}
}

// TestUpstreamTopologyNodeLocal (SPEC §12, §13): an upstream mapped to the
// node key is node-local: its volume is pinned to the node (the
// controller's, node-1), a claim for another node is RESOURCE_EXHAUSTED
// before the upstream is asked, an upstream that names another node is
// refused after its volume is deleted; a group with such a member sends
// another zone's claims past it.
func TestUpstreamTopologyNodeLocal(t *testing.T) {
	nodeKey, zoneKey := testPrefix+"/node", testPrefix+"/zone"
	nodeMap := map[string]string{fakeNodeKey: "node"}
	for _, tc := range []struct {
		name    string
		answer  []*csi.Topology
		req     *csi.TopologyRequirement
		want    []*csi.Topology
		code    codes.Code
		msg     []string
		asked   bool
		deleted bool
	}{
		{name: "no requirements", answer: []*csi.Topology{topo(fakeNodeKey, "node-1")}, want: []*csi.Topology{topo(nodeKey, "node-1")}, asked: true},
		{name: "strict, this node", answer: []*csi.Topology{topo(fakeNodeKey, "node-1")}, asked: true,
			req:  &csi.TopologyRequirement{Requisite: []*csi.Topology{topo(nodeKey, "node-1")}, Preferred: []*csi.Topology{topo(nodeKey, "node-1")}},
			want: []*csi.Topology{topo(nodeKey, "node-1")}},
		{name: "strict, another node", code: codes.ResourceExhausted,
			req: &csi.TopologyRequirement{Requisite: []*csi.Topology{topo(nodeKey, "node-2")}, Preferred: []*csi.Topology{topo(nodeKey, "node-2")}},
			msg: []string{`connection "up" is node-local`, `this controller runs on node "node-1"`, `asked for node "node-2"`}},
		{name: "the upstream names another node", answer: []*csi.Topology{topo(fakeNodeKey, "node-9")}, code: codes.FailedPrecondition,
			asked: true, deleted: true, msg: []string{`on node "node-9"`, `runs on node "node-1"`, "the upstream object was deleted"}},
		{name: "an empty term alone", answer: []*csi.Topology{{}}, code: codes.FailedPrecondition,
			asked: true, deleted: true, msg: []string{`connection "up"`, "the upstream answered an empty term", "the upstream object was deleted"}},
		{name: "an empty term beside this node", answer: []*csi.Topology{topo(fakeNodeKey, "node-1"), {}}, code: codes.FailedPrecondition,
			asked: true, deleted: true, msg: []string{`connection "up"`, "the upstream answered an empty term", "accessible_topology[1]", "the upstream object was deleted"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := createAndCheck(t, nodeMap, nil, tc.answer, tc.req, tc.want, tc.code, tc.msg)
			if n := len(f.requests("CreateVolume")); (n == 1) != tc.asked {
				t.Errorf("upstream CreateVolume called %d times, want asked: %v", n, tc.asked)
			}
			if n := len(f.requests("DeleteVolume")); (n == 1) != tc.deleted {
				t.Errorf("upstream DeleteVolume called %d times, want deleted: %v", n, tc.deleted)
			}
		})
	}

	t.Run("group member", func(t *testing.T) {
		local, zone2 := newFakeUpstream(t), newFakeUpstream(t)
		local.setResponse("CreateVolume", &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: "vol-1", AccessibleTopology: []*csi.Topology{topo(fakeNodeKey, "node-1")}}})
		p := startProxy(t, func(o *pcsi.Options) { o.NodeSegments = map[string]string{zoneKey: "z1", nodeKey: "node-1"} })
		p.add(t, "local", conn{Endpoint: local.Endpoint, UpstreamTopology: nodeMap})
		p.add(t, "zone2", conn{Endpoint: zone2.Endpoint, Topology: zoneEntries("z2")})
		p.write(t, "g", "driver: group\ngroup:\n  members: [local, zone2]\n")
		for i, c := range []struct {
			zone, member string
			want         []*csi.Topology
		}{
			{"z1", "local", []*csi.Topology{topo(nodeKey, "node-1", zoneKey, "z1")}},
			{"z2", "zone2", []*csi.Topology{topo(zoneKey, "z2")}},
		} {
			req := createReq(fmt.Sprintf("pvc-g-%d", i), map[string]string{"connection": "g"})
			req.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: []*csi.Topology{topo(zoneKey, c.zone)}}
			resp, err := p.Controller.CreateVolume(callCtx(t), req)
			if err != nil {
				t.Fatalf("zone %s: %v", c.zone, err)
			}
			if id := resp.GetVolume().GetVolumeId(); !strings.HasPrefix(id, "v:"+c.member+"/") {
				t.Errorf("zone %s: volume %q, want one of member %q", c.zone, id, c.member)
			}
			if d := diff(c.want, resp.GetVolume().GetAccessibleTopology()); d != "" {
				t.Errorf("zone %s: accessible_topology (-want +got):\n%s", c.zone, d)
			}
		}
	})
}

// TestGetCapacityWithoutConnection (SPEC §6): with no connection named
// and no proxy.defaultConnection, GetCapacity is OK with 0 (csi-sanity and
// other COs ask so), and no upstream is asked.
func TestGetCapacityWithoutConnection(t *testing.T) {
	f := newFakeUpstream(t, withControllerCaps(csi.ControllerServiceCapability_RPC_GET_CAPACITY))
	p := startProxy(t)
	p.add(t, "a", conn{Endpoint: f.Endpoint})
	resp, err := p.Controller.GetCapacity(callCtx(t), &csi.GetCapacityRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetAvailableCapacity() != 0 {
		t.Errorf("available_capacity %d, want 0", resp.GetAvailableCapacity())
	}
	if n := len(f.requests("GetCapacity")); n != 0 {
		t.Errorf("upstream asked %d times", n)
	}
}
