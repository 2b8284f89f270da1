package testupstream

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
)

// client starts a driver with profile p and returns a connection to it.
func client(t *testing.T, p Profile) *grpc.ClientConn {
	t.Helper()
	dir := t.TempDir()
	s, err := Start(filepath.Join(dir, "csi.sock"), p, hostpath.Options{
		DriverName: "test.upstream", NodeID: "node-1", BasePath: filepath.Join(dir, "base"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient(s.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

var mountCap = []*csi.VolumeCapability{{
	AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
	AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
}}

func controllerCaps(t *testing.T, c csi.ControllerClient) []csi.ControllerServiceCapability_RPC_Type {
	t.Helper()
	resp, err := c.ControllerGetCapabilities(context.Background(), &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var out []csi.ControllerServiceCapability_RPC_Type
	for _, c := range resp.GetCapabilities() {
		out = append(out, c.GetRpc().GetType())
	}
	return out
}

func TestHiddenCapabilitiesAreUnimplemented(t *testing.T) {
	conn := client(t, Profile{
		HideController:    []csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT, csi.ControllerServiceCapability_RPC_LIST_VOLUMES, csi.ControllerServiceCapability_RPC_EXPAND_VOLUME},
		HideNode:          []csi.NodeServiceCapability_RPC_Type{csi.NodeServiceCapability_RPC_EXPAND_VOLUME},
		NoVolumeExpansion: true,
	})
	ctrl := csi.NewControllerClient(conn)
	caps := controllerCaps(t, ctrl)
	for _, hidden := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT, csi.ControllerServiceCapability_RPC_LIST_VOLUMES, csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
	} {
		if slices.Contains(caps, hidden) {
			t.Errorf("%s is still advertised: %v", hidden, caps)
		}
	}
	if !slices.Contains(caps, csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME) {
		t.Errorf("CREATE_DELETE_VOLUME was hidden too: %v", caps)
	}
	_, err := ctrl.ListVolumes(context.Background(), &csi.ListVolumesRequest{})
	testkit.WantCode(t, err, codes.Unimplemented)
	_, err = ctrl.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: "vol-x"})
	testkit.WantCode(t, err, codes.Unimplemented)
	_, err = csi.NewNodeClient(conn).NodeExpandVolume(context.Background(), &csi.NodeExpandVolumeRequest{VolumeId: "vol-x", VolumePath: "/x"})
	testkit.WantCode(t, err, codes.Unimplemented)

	plugin, err := csi.NewIdentityClient(conn).GetPluginCapabilities(context.Background(), &csi.GetPluginCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range plugin.GetCapabilities() {
		if c.GetVolumeExpansion() != nil {
			t.Errorf("VolumeExpansion is still advertised: %v", plugin)
		}
	}
}

func TestNodeOnly(t *testing.T) {
	conn := client(t, Profile{NodeOnly: true})
	ctrl := csi.NewControllerClient(conn)
	if caps := controllerCaps(t, ctrl); len(caps) != 0 {
		t.Errorf("a node-only driver advertises %v", caps)
	}
	_, err := ctrl.ValidateVolumeCapabilities(context.Background(), &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "vol-x", VolumeCapabilities: mountCap})
	testkit.WantCode(t, err, codes.Unimplemented)
	plugin, err := csi.NewIdentityClient(conn).GetPluginCapabilities(context.Background(), &csi.GetPluginCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range plugin.GetCapabilities() {
		if c.GetService().GetType() == csi.PluginCapability_Service_CONTROLLER_SERVICE {
			t.Errorf("a node-only driver advertises CONTROLLER_SERVICE")
		}
	}
	if _, err := csi.NewNodeClient(conn).NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{}); err != nil {
		t.Errorf("NodeGetInfo: %v", err)
	}
}

func TestLongIDsRoundTrip(t *testing.T) {
	conn := client(t, Profile{IDLength: 120, TopologyKey: "topology.hostpath.csi/node"})
	ctrl := csi.NewControllerClient(conn)
	ctx := context.Background()
	vol, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "v1", VolumeCapabilities: mountCap})
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	if len(id) != 120 {
		t.Fatalf("volume id %q is %d bytes, want 120", id, len(id))
	}
	if got := vol.GetVolume().GetAccessibleTopology(); len(got) != 1 || got[0].GetSegments()["topology.hostpath.csi/node"] != "node-1" {
		t.Errorf("accessible_topology = %v, want the node", got)
	}
	snap, err := ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s1", SourceVolumeId: id})
	if err != nil {
		t.Fatal(err)
	}
	if s := snap.GetSnapshot(); len(s.GetSnapshotId()) != 120 || s.GetSourceVolumeId() != id {
		t.Errorf("snapshot %v: want a 120-byte id and source %s", s, id)
	}
	got, err := ctrl.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: id})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetVolume().GetVolumeId() != id {
		t.Errorf("ControllerGetVolume answered %s, want %s", got.GetVolume().GetVolumeId(), id)
	}
	list, err := ctrl.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SourceVolumeId: id})
	if err != nil {
		t.Fatal(err)
	}
	if e := list.GetEntries(); len(e) != 1 || e[0].GetSnapshot().GetSnapshotId() != snap.GetSnapshot().GetSnapshotId() {
		t.Errorf("ListSnapshots by source %s = %v, want the one snapshot under its long id", id, e)
	}
}

func TestEndlessPaging(t *testing.T) {
	conn := client(t, Profile{EndlessPaging: true})
	ctrl := csi.NewControllerClient(conn)
	ctx := context.Background()
	if _, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "v1", VolumeCapabilities: mountCap}); err != nil {
		t.Fatal(err)
	}
	tok := ""
	for range 3 {
		resp, err := ctrl.ListVolumes(ctx, &csi.ListVolumesRequest{StartingToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetEntries()) != 1 || resp.GetNextToken() != EndlessToken {
			t.Fatalf("page %v: want the one volume again and next_token %q", resp, EndlessToken)
		}
		tok = resp.GetNextToken()
	}
	_, err := ctrl.ListVolumes(ctx, &csi.ListVolumesRequest{StartingToken: "bogus"})
	testkit.WantCode(t, err, codes.Aborted)
}

func TestModifyFollowsEBS(t *testing.T) {
	conn := client(t, Profile{ModifyKeys: []string{"iops"}})
	ctrl := csi.NewControllerClient(conn)
	ctx := context.Background()
	if !slices.Contains(controllerCaps(t, ctrl), csi.ControllerServiceCapability_RPC_MODIFY_VOLUME) {
		t.Fatal("MODIFY_VOLUME not advertised")
	}
	vol, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "v1", VolumeCapabilities: mountCap})
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	if _, err := ctrl.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: id}); err != nil {
		t.Errorf("empty mutable_parameters: %v, want success (nothing to modify)", err)
	}
	_, err = ctrl.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: id, MutableParameters: map[string]string{"bogus": "1"}})
	testkit.WantCode(t, err, codes.InvalidArgument)
	_, err = ctrl.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: "vol-00000000000000000000000000000000", MutableParameters: map[string]string{"iops": "1"}})
	testkit.WantCode(t, err, codes.NotFound)
	_, err = ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "v2", VolumeCapabilities: mountCap, MutableParameters: map[string]string{"bogus": "1"}})
	testkit.WantCode(t, err, codes.InvalidArgument)
}

func TestHangAnswersNothing(t *testing.T) {
	conn := client(t, Profile{Hang: true})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := csi.NewIdentityClient(conn).Probe(ctx, &csi.ProbeRequest{})
	testkit.WantCode(t, err, codes.DeadlineExceeded)
}

func TestValidateRefusesUnknownCapabilities(t *testing.T) {
	p := Profile{
		HideController: []csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_CLONE_VOLUME},
		HideNode:       []csi.NodeServiceCapability_RPC_Type{csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME},
		IDLength:       20,
	}
	err := p.Validate()
	if err == nil {
		t.Fatal("Validate accepted a profile that hides CLONE_VOLUME and staging and has 20-byte ids")
	}
	for _, want := range []string{"CLONE_VOLUME", "STAGE_UNSTAGE_VOLUME", "IDLength 20"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}
