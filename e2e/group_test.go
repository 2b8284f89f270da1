package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/democratic-csi/proxy-topology/internal/testbin"
	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
)

// groupRig is one proxy (controller and node in one process, as on a
// single node) with a three-zone group: g-zone1 and g-zone3 built-in
// local-hostpath storage, g-zone2 a `driver: csi` connection to a
// standalone local-hostpath upstream on its own socket, and the group
// "zones" of the three.
type groupRig struct {
	dir        string
	connDir    string
	bases      map[string]string // member -> base path of its storage
	controller csi.ControllerClient
	node       csi.NodeClient
}

var groupMembers = []string{"g-zone1", "g-zone2", "g-zone3"}

func startGroupRig(t *testing.T) *groupRig {
	t.Helper()
	dir := newTestDir(t)
	r := &groupRig{dir: dir, connDir: filepath.Join(dir, "connections"), bases: map[string]string{}}
	for i, m := range groupMembers {
		r.bases[m] = filepath.Join(dir, "storage", fmt.Sprintf("zone%d", i+1))
	}
	cfgPath := func(name, content string) string {
		p := filepath.Join(dir, "config", name+".yaml")
		testkit.WriteFile(t, p, content, 0o640)
		return p
	}
	up := startProcess(t, dir, processSpec{name: "upstream-zone2", mode: "all", nodeID: "node-g-zone2",
		config: cfgPath("upstream-zone2", upstreamConfig(r.bases["g-zone2"], true))})
	zoneTopo := func(zone string) string {
		return fmt.Sprintf("proxy:\n  perDriver:\n    topology:\n    - requirements:\n        zone: %s\n", zone)
	}
	testkit.WriteFile(t, filepath.Join(r.connDir, "g-zone1.yaml"), fmt.Sprintf("driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\n  stage: true\n", r.bases["g-zone1"])+zoneTopo("zone1"), 0o640)
	testkit.WriteFile(t, filepath.Join(r.connDir, "g-zone2.yaml"), fmt.Sprintf("driver: csi\ncsi:\n  endpoint: unix://%s\n", up.sock)+zoneTopo("zone2"), 0o640)
	testkit.WriteFile(t, filepath.Join(r.connDir, "g-zone3.yaml"), fmt.Sprintf("driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\n", r.bases["g-zone3"])+zoneTopo("zone3"), 0o640)
	testkit.WriteFile(t, filepath.Join(r.connDir, "zones.yaml"), "driver: group\ngroup:\n  members: [g-zone1, g-zone2, g-zone3]\n", 0o640)
	p := startProcess(t, dir, processSpec{name: "proxy", mode: "all", nodeID: "node-g-zone2",
		config: cfgPath("proxy", proxyConfig(r.connDir, filepath.Join(dir, "hosts", "proxy")))})
	r.controller = csi.NewControllerClient(p.conn)
	r.node = csi.NewNodeClient(p.conn)
	return r
}

// strict is the requirement the external-provisioner sends in strict
// WaitForFirstConsumer mode for a node of zone: requisite = preferred =
// the node's topology.
func strict(zone string) *csi.TopologyRequirement {
	return &csi.TopologyRequirement{Requisite: []*csi.Topology{zoneTopology(zone)}, Preferred: []*csi.Topology{zoneTopology(zone)}}
}

// exists says whether the member's storage holds kind/<handle>.
func (r *groupRig) exists(t *testing.T, member, kind, proxyID string) bool {
	t.Helper()
	handle := hostpath.VolumeDir(proxyID[strings.Index(proxyID, "/")+1:])
	if kind == "volumes" {
		// Recorded (an empty volume's directory is made at first use).
		return slices.Contains(volumesIn(t, r.bases[member]), handle)
	}
	_, err := os.Stat(filepath.Join(r.bases[member], kind, handle))
	return err == nil
}

// holder returns the member whose storage holds the object, checking that
// exactly one does.
func (r *groupRig) holder(t *testing.T, kind, proxyID string) string {
	t.Helper()
	var found []string
	for _, m := range groupMembers {
		if r.exists(t, m, kind, proxyID) {
			found = append(found, m)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s %s is held by %v, want exactly one member", kind, proxyID, found)
	}
	return found[0]
}

// TestGroupRouting: a group StorageClass over three members in three
// zones, through real sockets (SPEC §11). CreateVolume with each zone's
// strict term lands on that zone's member, and the volume's ID names the
// member, so delete, expand, snapshot, restore, clone and the node calls
// reach it.
func TestGroupRouting(t *testing.T) {
	r := startGroupRig(t)
	vols := map[string]*csi.Volume{}
	for i, m := range groupMembers {
		zone := fmt.Sprintf("zone%d", i+1)
		req := createRequest("pvc-group-"+zone, "zones", strict(zone))
		resp, err := r.controller.CreateVolume(callCtx(t), req)
		if err != nil {
			t.Fatalf("CreateVolume for %s: %v", zone, err)
		}
		vol := resp.GetVolume()
		if !strings.HasPrefix(vol.GetVolumeId(), "v:"+m+"/") {
			t.Errorf("%s: volume_id %s, want member %s's", zone, vol.GetVolumeId(), m)
		}
		if diff := cmp.Diff([]*csi.Topology{zoneTopology(zone)}, vol.GetAccessibleTopology(), protocmp.Transform()); diff != "" {
			t.Errorf("%s: accessible_topology (-want +got):\n%s", zone, diff)
		}
		if got := r.holder(t, "volumes", vol.GetVolumeId()); got != m {
			t.Errorf("%s: the volume's directory is in %s's storage, want %s's", zone, got, m)
		}
		// A retry reaches the same member and the same volume.
		again, err := r.controller.CreateVolume(callCtx(t), req)
		if err != nil || again.GetVolume().GetVolumeId() != vol.GetVolumeId() {
			t.Errorf("%s: retried CreateVolume: %v, %v; want %s", zone, again.GetVolume().GetVolumeId(), err, vol.GetVolumeId())
		}
		vols[zone] = vol
	}

	// An Immediate claim under --immediate-topology: every zone requisite,
	// the preferred order rotated; the first preferred term decides.
	imm, err := r.controller.CreateVolume(callCtx(t), createRequest("pvc-group-imm", "zones", &csi.TopologyRequirement{
		Requisite: []*csi.Topology{zoneTopology("zone1"), zoneTopology("zone2"), zoneTopology("zone3")},
		Preferred: []*csi.Topology{zoneTopology("zone3"), zoneTopology("zone1"), zoneTopology("zone2")},
	}))
	if err != nil || !strings.HasPrefix(imm.GetVolume().GetVolumeId(), "v:g-zone3/") {
		t.Errorf("immediate claim preferring zone3: %v, %v; want member g-zone3", imm.GetVolume().GetVolumeId(), err)
	}
	// No requirements: the first member.
	none, err := r.controller.CreateVolume(callCtx(t), createRequest("pvc-group-none", "zones", nil))
	if err != nil || !strings.HasPrefix(none.GetVolume().GetVolumeId(), "v:g-zone1/") {
		t.Errorf("claim without requirements: %v, %v; want member g-zone1", none.GetVolume().GetVolumeId(), err)
	}
	// A zone no member serves: RESOURCE_EXHAUSTED listing every member
	// and what it offers.
	_, err = r.controller.CreateVolume(callCtx(t), createRequest("pvc-group-zone4", "zones", strict("zone4")))
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("zone4: %v, want ResourceExhausted", err)
	}
	for _, s := range []string{`group "zones"`, `member "g-zone1" offers [{` + zoneKey + `=zone1}]`, `member "g-zone3" offers [{` + zoneKey + `=zone3}]`} {
		if !strings.Contains(status.Convert(err).Message(), s) {
			t.Errorf("zone4: message %q lacks %q", status.Convert(err).Message(), s)
		}
	}

	// Calls on an existing volume route to its member.
	v2 := vols["zone2"].GetVolumeId()
	if _, err := r.controller.ControllerExpandVolume(callCtx(t), &csi.ControllerExpandVolumeRequest{VolumeId: v2, CapacityRange: &csi.CapacityRange{RequiredBytes: 4 << 20}}); err != nil {
		t.Fatalf("ControllerExpandVolume: %v", err)
	}
	got, err := r.controller.ControllerGetVolume(callCtx(t), &csi.ControllerGetVolumeRequest{VolumeId: v2})
	if err != nil || got.GetVolume().GetCapacityBytes() != 4<<20 {
		t.Errorf("ControllerGetVolume after expansion: %v bytes, %v; want %d", got.GetVolume().GetCapacityBytes(), err, 4<<20)
	}
	snap, err := r.controller.CreateSnapshot(callCtx(t), &csi.CreateSnapshotRequest{Name: "snap-group-zone2", SourceVolumeId: v2})
	if err != nil {
		t.Fatalf("CreateSnapshot: %v", err)
	}
	snapID := snap.GetSnapshot().GetSnapshotId()
	if !strings.HasPrefix(snapID, "s:g-zone2/") || r.holder(t, "snapshots", snapID) != "g-zone2" {
		t.Errorf("snapshot %s is not member g-zone2's", snapID)
	}

	// Restore and clone follow the source's member, for a claim in its
	// zone; a claim for another zone is refused naming the member, never
	// sent to another member.
	fromSnap := func(name string, req *csi.TopologyRequirement) *csi.CreateVolumeRequest {
		cr := createRequest(name, "zones", req)
		cr.CapacityRange = &csi.CapacityRange{RequiredBytes: 4 << 20} // the expanded source's size
		cr.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapID}}}
		return cr
	}
	restored, err := r.controller.CreateVolume(callCtx(t), fromSnap("pvc-group-restore", strict("zone2")))
	if err != nil || !strings.HasPrefix(restored.GetVolume().GetVolumeId(), "v:g-zone2/") {
		t.Fatalf("restore in zone2: %v, %v; want member g-zone2", restored.GetVolume().GetVolumeId(), err)
	}
	if r.holder(t, "volumes", restored.GetVolume().GetVolumeId()) != "g-zone2" {
		t.Error("the restored volume is not in g-zone2's storage")
	}
	// Immediate: zone1 preferred, but only g-zone2 holds the snapshot,
	// and it serves zone2, which is requisite: it goes there.
	restoredImm, err := r.controller.CreateVolume(callCtx(t), fromSnap("pvc-group-restore-imm", &csi.TopologyRequirement{
		Requisite: []*csi.Topology{zoneTopology("zone1"), zoneTopology("zone2")},
		Preferred: []*csi.Topology{zoneTopology("zone1"), zoneTopology("zone2")},
	}))
	if err != nil || !strings.HasPrefix(restoredImm.GetVolume().GetVolumeId(), "v:g-zone2/") {
		t.Errorf("immediate restore: %v, %v; want member g-zone2", restoredImm.GetVolume().GetVolumeId(), err)
	}
	_, err = r.controller.CreateVolume(callCtx(t), fromSnap("pvc-group-restore-zone1", strict("zone1")))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), `on member "g-zone2"`) {
		t.Errorf("restore for zone1 of a zone2 snapshot: %v; want ResourceExhausted naming member g-zone2", err)
	}
	clone := createRequest("pvc-group-clone", "zones", strict("zone2"))
	clone.CapacityRange = &csi.CapacityRange{RequiredBytes: 4 << 20}
	clone.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: v2}}}
	cloned, err := r.controller.CreateVolume(callCtx(t), clone)
	if err != nil || !strings.HasPrefix(cloned.GetVolume().GetVolumeId(), "v:g-zone2/") {
		t.Errorf("clone: %v, %v; want member g-zone2", cloned.GetVolume().GetVolumeId(), err)
	}

	// Capacity: the members admitting the segment, summed.
	capOf := func(params map[string]string, topo *csi.Topology) int64 {
		t.Helper()
		resp, err := r.controller.GetCapacity(callCtx(t), &csi.GetCapacityRequest{Parameters: params, AccessibleTopology: topo,
			VolumeCapabilities: []*csi.VolumeCapability{mountCapability()}})
		if err != nil {
			t.Fatalf("GetCapacity %v %v: %v", params, topo, err)
		}
		return resp.GetAvailableCapacity()
	}
	one := capOf(map[string]string{"connection": "g-zone2"}, zoneTopology("zone2"))
	if got := capOf(map[string]string{"connection": "zones"}, zoneTopology("zone2")); one <= 0 || !near(got, one) {
		t.Errorf("group capacity in zone2 %d, member g-zone2's %d", got, one)
	}
	if got := capOf(map[string]string{"connection": "zones"}, zoneTopology("zone4")); got != 0 {
		t.Errorf("group capacity in zone4 %d, want 0", got)
	}
	if got := capOf(map[string]string{"connection": "zones"}, nil); !near(got, 3*one) {
		t.Errorf("group capacity without topology %d, want the three members' %d", got, 3*one)
	}

	// The node calls reach the member: data written through the
	// published path lands in g-zone2's storage.
	if testbin.HaveRoot(t, "NodeStageVolume and NodePublishVolume bind-mount") {
		staging, target := filepath.Join(r.dir, "staging"), filepath.Join(r.dir, "target")
		cleanupMounts(t, target, staging)
		if _, err := r.node.NodeStageVolume(callCtx(t), &csi.NodeStageVolumeRequest{VolumeId: v2, StagingTargetPath: staging, VolumeCapability: mountCapability()}); err != nil {
			t.Fatalf("NodeStageVolume: %v", err)
		}
		if _, err := r.node.NodePublishVolume(callCtx(t), &csi.NodePublishVolumeRequest{VolumeId: v2, StagingTargetPath: staging, TargetPath: target, VolumeCapability: mountCapability()}); err != nil {
			t.Fatalf("NodePublishVolume: %v", err)
		}
		testkit.WriteFile(t, filepath.Join(target, "hello"), "from the group's pod", 0o640)
		handle := hostpath.VolumeDir(v2[strings.Index(v2, "/")+1:])
		if b, err := os.ReadFile(filepath.Join(r.bases["g-zone2"], "volumes", handle, "hello")); err != nil || string(b) != "from the group's pod" {
			t.Errorf("the file written at the target is not in g-zone2's volume: %q, %v", b, err)
		}
		if _, err := r.node.NodeGetVolumeStats(callCtx(t), &csi.NodeGetVolumeStatsRequest{VolumeId: v2, VolumePath: target}); err != nil {
			t.Errorf("NodeGetVolumeStats: %v", err)
		}
		if _, err := r.node.NodeUnpublishVolume(callCtx(t), &csi.NodeUnpublishVolumeRequest{VolumeId: v2, TargetPath: target}); err != nil {
			t.Errorf("NodeUnpublishVolume: %v", err)
		}
		if _, err := r.node.NodeUnstageVolume(callCtx(t), &csi.NodeUnstageVolumeRequest{VolumeId: v2, StagingTargetPath: staging}); err != nil {
			t.Errorf("NodeUnstageVolume: %v", err)
		}
	}

	// Listings name volumes by their member, never by the group.
	list, err := r.controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{})
	if err != nil {
		t.Fatalf("ListVolumes: %v", err)
	}
	perMember := map[string]int{}
	for _, e := range list.GetEntries() {
		id := e.GetVolume().GetVolumeId()
		perMember[id[2:strings.Index(id, "/")]]++
	}
	if diff := cmp.Diff(map[string]int{"g-zone1": 2, "g-zone2": 4, "g-zone3": 2}, perMember); diff != "" {
		t.Errorf("ListVolumes per connection (-want +got):\n%s", diff)
	}
	// An ID naming the group itself names nothing the proxy made.
	if _, err := r.controller.DeleteVolume(callCtx(t), &csi.DeleteVolumeRequest{VolumeId: "v:zones/vol-x"}); status.Code(err) != codes.FailedPrecondition ||
		!strings.Contains(status.Convert(err).Message(), `connection "zones" is a group`) {
		t.Errorf("DeleteVolume v:zones/vol-x: %v; want FailedPrecondition saying zones is a group", err)
	}

	// Delete reaches the member: each volume's directory goes.
	if _, err := r.controller.DeleteSnapshot(callCtx(t), &csi.DeleteSnapshotRequest{SnapshotId: snapID}); err != nil || r.exists(t, "g-zone2", "snapshots", snapID) {
		t.Errorf("DeleteSnapshot: %v (still there: %v)", err, r.exists(t, "g-zone2", "snapshots", snapID))
	}
	for _, e := range list.GetEntries() {
		id := e.GetVolume().GetVolumeId()
		member := id[2:strings.Index(id, "/")]
		if _, err := r.controller.DeleteVolume(callCtx(t), &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Errorf("DeleteVolume %s: %v", id, err)
		}
		if r.exists(t, member, "volumes", id) {
			t.Errorf("DeleteVolume %s: the directory is still in %s's storage", id, member)
		}
	}
}

// near says whether a and b differ by less than 1%: free space of the one
// file system all members share moves a little between two calls.
func near(a, b int64) bool {
	d := a - b
	if d < 0 {
		d = -d
	}
	return d <= b/100
}

// TestGroupMembersAtRunTime: membership is read on every call. A member
// that is missing or itself a group fails the calls that need it, naming
// it, and only the group: the other connections keep working, and adding
// the missing file repairs the group without touching it.
func TestGroupMembersAtRunTime(t *testing.T) {
	r := startGroupRig(t)
	testkit.WriteFile(t, filepath.Join(r.connDir, "partial.yaml"), "driver: group\ngroup:\n  members: [g-zone1, later, zones]\n", 0o640)
	testkit.WriteFile(t, filepath.Join(r.connDir, "broken.yaml"), "driver: group\ngroup:\n  members: []\n", 0o640)

	// zone1 is decided by the first member: the missing one is not needed.
	resp, err := r.controller.CreateVolume(callCtx(t), createRequest("pvc-partial-zone1", "partial", strict("zone1")))
	if err != nil || !strings.HasPrefix(resp.GetVolume().GetVolumeId(), "v:g-zone1/") {
		t.Fatalf("zone1 on partial: %v, %v", resp.GetVolume().GetVolumeId(), err)
	}
	_, err = r.controller.CreateVolume(callCtx(t), createRequest("pvc-partial-zone3", "partial", strict("zone3")))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), `group "partial": member "later" (group.members[1])`) {
		t.Errorf("zone3 on partial, member later missing: %v", err)
	}
	_, err = r.controller.GetCapacity(callCtx(t), &csi.GetCapacityRequest{Parameters: map[string]string{"connection": "partial"}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), `member "later"`) {
		t.Errorf("GetCapacity on partial: %v", err)
	}
	_, err = r.controller.CreateVolume(callCtx(t), createRequest("pvc-broken", "broken", strict("zone1")))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "group.members: required") {
		t.Errorf("broken group: %v", err)
	}
	// The other connections are unaffected.
	if _, err := r.controller.CreateVolume(callCtx(t), createRequest("pvc-zones-zone3", "zones", strict("zone3"))); err != nil {
		t.Errorf("zones, beside the broken groups: %v", err)
	}

	// The missing member appears; zone3 now passes it and reaches the
	// third member, a group: an error naming it.
	testkit.WriteFile(t, filepath.Join(r.connDir, "later.yaml"), fmt.Sprintf("driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\nproxy:\n  perDriver:\n    topology:\n    - requirements: {zone: zone2}\n", filepath.Join(r.dir, "storage", "later")), 0o640)
	_, err = r.controller.CreateVolume(callCtx(t), createRequest("pvc-partial-zone3", "partial", strict("zone3")))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), `member "zones" (group.members[2]) is itself a group`) {
		t.Errorf("zone3 on partial, member zones a group: %v", err)
	}
	resp, err = r.controller.CreateVolume(callCtx(t), createRequest("pvc-partial-zone2", "partial", strict("zone2")))
	if err != nil || !strings.HasPrefix(resp.GetVolume().GetVolumeId(), "v:later/") {
		t.Errorf("zone2 on partial after later.yaml appeared: %v, %v", resp.GetVolume().GetVolumeId(), err)
	}
}
