package csi_test

import (
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/ids"
)

// TestControllerModifyVolume: mutable_parameters are forwarded by volume
// ID as the CO sent them (a VolumeAttributesClass's keys are the
// upstream's, "connection" too: CreateVolume passes them on unchanged as
// well), with secrets merged.
func TestControllerModifyVolume(t *testing.T) {
	f := newFakeUpstream(t, withControllerCaps(csi.ControllerServiceCapability_RPC_MODIFY_VOLUME))
	f.setResponse("ControllerModifyVolume", &csi.ControllerModifyVolumeResponse{})
	p := startProxy(t)
	p.add(t, "a", conn{Endpoint: f.Endpoint, Secrets: map[string]string{"user": "conn-user"},
		Parameters: map[string]string{"fs": "conn"}})
	resp, err := p.Controller.ControllerModifyVolume(callCtx(t), &csi.ControllerModifyVolumeRequest{
		VolumeId: "v:a/pool/vol-1", MutableParameters: map[string]string{"iops": "3000", "connection": "a"},
		Secrets: map[string]string{"password": "s3cr3t-req"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(&csi.ControllerModifyVolumeResponse{}, resp); d != "" {
		t.Errorf("response (-want +got):\n%s", d)
	}
	// The connection's parameters are CreateVolume defaults, not mutable
	// parameters: they are not merged in.
	want := &csi.ControllerModifyVolumeRequest{
		VolumeId: "pool/vol-1", MutableParameters: map[string]string{"iops": "3000", "connection": "a"},
		Secrets: map[string]string{"password": "s3cr3t-req", "user": "conn-user"},
	}
	if d := diff(want, only[*csi.ControllerModifyVolumeRequest](t, f, "ControllerModifyVolume")); d != "" {
		t.Errorf("upstream request (-want +got):\n%s", d)
	}
}

// TestControllerModifyVolumeRefused: what the proxy refuses without asking
// the upstream. An empty mutable_parameters map is not among them: it is
// the upstream's to judge (forwarded_fields_test.go).
func TestControllerModifyVolumeRefused(t *testing.T) {
	tests := []struct {
		name    string
		caps    []csi.ControllerServiceCapability_RPC_Type
		req     *csi.ControllerModifyVolumeRequest
		code    codes.Code
		message string
	}{
		{name: "upstream without MODIFY_VOLUME", caps: []csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME},
			req:  &csi.ControllerModifyVolumeRequest{VolumeId: "v:a/vol-1", MutableParameters: map[string]string{"iops": "1"}},
			code: codes.InvalidArgument, message: `connection "a" (driver csi) does not support ControllerModifyVolume`},
		{name: "malformed id", req: &csi.ControllerModifyVolumeRequest{VolumeId: "vol-1", MutableParameters: map[string]string{"iops": "1"}},
			code: codes.NotFound},
		{name: "missing connection", req: &csi.ControllerModifyVolumeRequest{VolumeId: "v:gone/vol-1", MutableParameters: map[string]string{"iops": "1"}},
			code: codes.FailedPrecondition, message: `"gone"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			caps := tt.caps
			if caps == nil {
				caps = []csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_MODIFY_VOLUME}
			}
			f := newFakeUpstream(t, withControllerCaps(caps...))
			p := startProxy(t)
			p.add(t, "a", conn{Endpoint: f.Endpoint})
			_, err := p.Controller.ControllerModifyVolume(callCtx(t), tt.req)
			testkit.WantCode(t, err, tt.code, tt.message)
			if got := f.routed(); len(got) != 0 {
				t.Errorf("upstream received %v", got)
			}
		})
	}
}

// TestGetSnapshot routes by snapshot ID and wraps both IDs it returns.
func TestGetSnapshot(t *testing.T) {
	f := newFakeUpstream(t, withControllerCaps(csi.ControllerServiceCapability_RPC_GET_SNAPSHOT))
	f.setResponse("GetSnapshot", &csi.GetSnapshotResponse{Snapshot: &csi.Snapshot{
		SnapshotId: "snap-1", SourceVolumeId: "vol-1", SizeBytes: 7, ReadyToUse: true}})
	other := newFakeUpstream(t, withControllerCaps(csi.ControllerServiceCapability_RPC_GET_SNAPSHOT))
	p := startProxy(t)
	p.add(t, "a", conn{Endpoint: other.Endpoint})
	p.add(t, "b", conn{Endpoint: f.Endpoint, Secrets: map[string]string{"user": "conn-user"}})
	resp, err := p.Controller.GetSnapshot(callCtx(t), &csi.GetSnapshotRequest{SnapshotId: "s:b/snap-1"})
	if err != nil {
		t.Fatal(err)
	}
	want := &csi.GetSnapshotResponse{Snapshot: &csi.Snapshot{SnapshotId: "s:b/snap-1", SourceVolumeId: "v:b/vol-1", SizeBytes: 7, ReadyToUse: true}}
	if d := diff(want, resp); d != "" {
		t.Errorf("response (-want +got):\n%s", d)
	}
	if d := diff(&csi.GetSnapshotRequest{SnapshotId: "snap-1", Secrets: map[string]string{"user": "conn-user"}},
		only[*csi.GetSnapshotRequest](t, f, "GetSnapshot")); d != "" {
		t.Errorf("upstream request (-want +got):\n%s", d)
	}
	if got := other.routed(); len(got) != 0 {
		t.Errorf("connection a's upstream received %v", got)
	}

	ctx := callCtx(t)
	_, err = p.Controller.GetSnapshot(ctx, &csi.GetSnapshotRequest{SnapshotId: "v:b/vol-1"})
	testkit.WantCode(t, err, codes.NotFound)
	_, err = p.Controller.GetSnapshot(ctx, &csi.GetSnapshotRequest{})
	testkit.WantCode(t, err, codes.InvalidArgument)

	without := newFakeUpstream(t, withControllerCaps(csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT))
	p.add(t, "c", conn{Endpoint: without.Endpoint})
	_, err = p.Controller.GetSnapshot(ctx, &csi.GetSnapshotRequest{SnapshotId: "s:c/snap-1"})
	testkit.WantCode(t, err, codes.InvalidArgument, `connection "c"`, "GetSnapshot")

	// An upstream answering a snapshot whose id cannot become a proxy id
	// (a handle longer than the proxy parses back) is an error: its raw
	// id must never reach the CO.
	f.setResponse("GetSnapshot", &csi.GetSnapshotResponse{Snapshot: &csi.Snapshot{SnapshotId: strings.Repeat("x", ids.MaxHandle+1)}})
	_, err = p.Controller.GetSnapshot(ctx, &csi.GetSnapshotRequest{SnapshotId: "s:b/snap-1"})
	testkit.WantCode(t, err, codes.Internal, `connection "b"`, "cannot be made a proxy id")
}

// TestControllerGetVolumeHealth routes by volume ID and hands back the
// proxy's ID.
func TestControllerGetVolumeHealth(t *testing.T) {
	f := newFakeUpstream(t, withControllerCaps(csi.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH))
	statuses := []*csi.VolumeHealth_VolumeHealthEntry{{Message: "one path of two is down"}}
	f.setResponse("ControllerGetVolumeHealth", &csi.ControllerGetVolumeHealthResponse{
		VolumeHealth: &csi.VolumeHealth{VolumeId: "vol-1", HealthStatuses: statuses}})
	p := startProxy(t)
	p.add(t, "a", conn{Endpoint: f.Endpoint, Secrets: map[string]string{"user": "conn-user"}})
	resp, err := p.Controller.ControllerGetVolumeHealth(callCtx(t), &csi.ControllerGetVolumeHealthRequest{VolumeId: "v:a/vol-1"})
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(&csi.ControllerGetVolumeHealthResponse{VolumeHealth: &csi.VolumeHealth{VolumeId: "v:a/vol-1", HealthStatuses: statuses}}, resp); d != "" {
		t.Errorf("response (-want +got):\n%s", d)
	}
	if d := diff(&csi.ControllerGetVolumeHealthRequest{VolumeId: "vol-1", Secrets: map[string]string{"user": "conn-user"}},
		only[*csi.ControllerGetVolumeHealthRequest](t, f, "ControllerGetVolumeHealth")); d != "" {
		t.Errorf("upstream request (-want +got):\n%s", d)
	}

	without := newFakeUpstream(t)
	p.add(t, "b", conn{Endpoint: without.Endpoint})
	_, err = p.Controller.ControllerGetVolumeHealth(callCtx(t), &csi.ControllerGetVolumeHealthRequest{VolumeId: "v:b/vol-1"})
	testkit.WantCode(t, err, codes.InvalidArgument, `connection "b"`, "ControllerGetVolumeHealth")
	_, err = p.Controller.ControllerGetVolumeHealth(callCtx(t), &csi.ControllerGetVolumeHealthRequest{VolumeId: "b/vol-1"})
	testkit.WantCode(t, err, codes.NotFound)
}

// TestNodeGetVolumeHealth routes by volume ID to the node upstream, hands
// back the proxy's ID, and, like NodeGetVolumeStats, names no staging path
// to an upstream that does not stage: the proxy staged nothing there.
func TestNodeGetVolumeHealth(t *testing.T) {
	statuses := []*csi.VolumeHealth_VolumeHealthEntry{{Message: "read errors"}}
	tests := []struct {
		name   string
		caps   []csi.NodeServiceCapability_RPC_Type
		wantUp *csi.NodeGetVolumeHealthRequest
	}{
		{
			name:   "staging upstream",
			caps:   []csi.NodeServiceCapability_RPC_Type{csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH, csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME},
			wantUp: &csi.NodeGetVolumeHealthRequest{VolumeId: "vol-1", VolumePublishPath: "/mnt/target", StagingTargetPath: "/mnt/staging"},
		},
		{
			name:   "upstream without staging",
			caps:   []csi.NodeServiceCapability_RPC_Type{csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH},
			wantUp: &csi.NodeGetVolumeHealthRequest{VolumeId: "vol-1", VolumePublishPath: "/mnt/target"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeUpstream(t, withNodeCaps(tt.caps...))
			f.setResponse("NodeGetVolumeHealth", &csi.NodeGetVolumeHealthResponse{
				VolumeHealth: &csi.VolumeHealth{VolumeId: "vol-1", HealthStatuses: statuses}})
			p := startProxy(t)
			p.add(t, "a", conn{Endpoint: f.Endpoint})
			resp, err := p.Node.NodeGetVolumeHealth(callCtx(t), &csi.NodeGetVolumeHealthRequest{
				VolumeId: "v:a/vol-1", VolumePublishPath: "/mnt/target", StagingTargetPath: "/mnt/staging"})
			if err != nil {
				t.Fatal(err)
			}
			if d := diff(&csi.NodeGetVolumeHealthResponse{VolumeHealth: &csi.VolumeHealth{VolumeId: "v:a/vol-1", HealthStatuses: statuses}}, resp); d != "" {
				t.Errorf("response (-want +got):\n%s", d)
			}
			if d := diff(tt.wantUp, only[*csi.NodeGetVolumeHealthRequest](t, f, "NodeGetVolumeHealth")); d != "" {
				t.Errorf("upstream request (-want +got):\n%s", d)
			}
		})
	}

	t.Run("upstream without GET_VOLUME_HEALTH", func(t *testing.T) {
		f := newFakeUpstream(t)
		p := startProxy(t)
		p.add(t, "a", conn{Endpoint: f.Endpoint})
		_, err := p.Node.NodeGetVolumeHealth(callCtx(t), &csi.NodeGetVolumeHealthRequest{VolumeId: "v:a/vol-1", VolumePublishPath: "/mnt/target"})
		testkit.WantCode(t, err, codes.InvalidArgument, `connection "a"`, "NodeGetVolumeHealth")
		if got := f.routed(); len(got) != 0 {
			t.Errorf("upstream received %v", got)
		}
	})
}
