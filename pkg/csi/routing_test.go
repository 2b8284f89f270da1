package csi_test

import (
	"context"
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/ids"
)

// routedCall is one RPC that routes by a volume or snapshot ID, with every
// other required field filled in.
type routedCall struct {
	method string
	// tolerant calls succeed for IDs the proxy never made (CSI
	// idempotency: nothing to delete, unstage or unpublish).
	tolerant bool
	call     func(ctx context.Context, p *testProxy, id string) error
}

var routedCalls = []routedCall{
	{method: "DeleteVolume", tolerant: true, call: func(ctx context.Context, p *testProxy, id string) error {
		_, err := p.Controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
		return err
	}},
	{method: "DeleteSnapshot", tolerant: true, call: func(ctx context.Context, p *testProxy, id string) error {
		_, err := p.Controller.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: id})
		return err
	}},
	{method: "NodeUnpublishVolume", tolerant: true, call: func(ctx context.Context, p *testProxy, id string) error {
		_, err := p.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: "/mnt/target"})
		return err
	}},
	{method: "NodeUnstageVolume", tolerant: true, call: func(ctx context.Context, p *testProxy, id string) error {
		_, err := p.Node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: "/mnt/staging"})
		return err
	}},
	{method: "ControllerGetVolume", call: func(ctx context.Context, p *testProxy, id string) error {
		_, err := p.Controller.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: id})
		return err
	}},
	{method: "ControllerExpandVolume", call: func(ctx context.Context, p *testProxy, id string) error {
		_, err := p.Controller.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 1}})
		return err
	}},
	{method: "ValidateVolumeCapabilities", call: func(ctx context.Context, p *testProxy, id string) error {
		_, err := p.Controller.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: []*csi.VolumeCapability{testkit.RWO()}})
		return err
	}},
	{method: "CreateSnapshot", call: func(ctx context.Context, p *testProxy, id string) error {
		_, err := p.Controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-1", SourceVolumeId: id})
		return err
	}},
	{method: "NodeStageVolume", call: func(ctx context.Context, p *testProxy, id string) error {
		_, err := p.Node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: "/mnt/staging", VolumeCapability: testkit.RWO()})
		return err
	}},
	{method: "NodePublishVolume", call: func(ctx context.Context, p *testProxy, id string) error {
		_, err := p.Node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, TargetPath: "/mnt/target", VolumeCapability: testkit.RWO()})
		return err
	}},
	{method: "NodeGetVolumeStats", call: func(ctx context.Context, p *testProxy, id string) error {
		_, err := p.Node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: "/mnt/target"})
		return err
	}},
	{method: "NodeExpandVolume", call: func(ctx context.Context, p *testProxy, id string) error {
		_, err := p.Node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: "/mnt/target"})
		return err
	}},
}

// idOf returns an ID of the kind the call routes by.
func idOf(method, conn, handle string) string {
	if method == "DeleteSnapshot" {
		return "s:" + conn + "/" + handle
	}
	return "v:" + conn + "/" + handle
}

// TestRoutedCallsForward: each call reaches the upstream of the connection
// its ID names, with the handle unwrapped.
func TestRoutedCallsForward(t *testing.T) {
	for _, rc := range routedCalls {
		t.Run(rc.method, func(t *testing.T) {
			fa, fb := newFakeUpstream(t), newFakeUpstream(t)
			p := startProxy(t)
			p.add(t, "a", conn{Endpoint: fa.Endpoint})
			p.add(t, "b", conn{Endpoint: fb.Endpoint})
			if err := rc.call(callCtx(t), p, idOf(rc.method, "b", "pool/h-1")); err != nil {
				t.Fatal(err)
			}
			if got := fa.routed(); len(got) != 0 {
				t.Errorf("connection a's upstream received %v", got)
			}
			if d := diff([]string{rc.method}, fb.routed()); d != "" {
				t.Fatalf("connection b's upstream calls (-want +got):\n%s", d)
			}
			req := fb.requests(rc.method)[0]
			var got string
			switch r := req.(type) {
			case *csi.CreateSnapshotRequest:
				got = r.GetSourceVolumeId()
			case *csi.DeleteSnapshotRequest:
				got = r.GetSnapshotId()
			case interface{ GetVolumeId() string }:
				got = r.GetVolumeId()
			}
			if got != "pool/h-1" {
				t.Errorf("upstream received id %q, want the handle %q", got, "pool/h-1")
			}
		})
	}
}

// TestRoutedCallsRequests checks the full request and response of the
// controller calls that route by ID.
func TestRoutedCallsRequests(t *testing.T) {
	entries := []accessible.Entry{{Requirements: map[string]string{"zone": "z1"}, Extra: map[string]string{"custom.prefix/custom.name": "v"}}}
	secrets := map[string]string{"password": "s3cr3t-req"}
	merged := map[string]string{"password": "s3cr3t-req", "user": "conn-user"}
	tests := []struct {
		name     string
		call     func(context.Context, *testProxy) (proto.Message, error)
		wantUp   proto.Message
		wantResp proto.Message
	}{
		{
			name: "DeleteVolume",
			call: func(ctx context.Context, p *testProxy) (proto.Message, error) {
				return p.Controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "v:a/vol-1", Secrets: secrets})
			},
			wantUp:   &csi.DeleteVolumeRequest{VolumeId: "vol-1", Secrets: merged},
			wantResp: &csi.DeleteVolumeResponse{},
		},
		{
			name: "ControllerGetVolume",
			call: func(ctx context.Context, p *testProxy) (proto.Message, error) {
				return p.Controller.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: "v:a/vol-1"})
			},
			wantUp: &csi.ControllerGetVolumeRequest{VolumeId: "vol-1"},
			// The upstream's own topology (upstream.example.com/rack) is
			// replaced by the connection's.
			wantResp: &csi.ControllerGetVolumeResponse{
				Volume: &csi.Volume{VolumeId: "v:a/vol-1", CapacityBytes: 1 << 30, AccessibleTopology: []*csi.Topology{
					topo(testPrefix+"/zone", "z1", "custom.prefix/custom.name", "v")}},
				Status: &csi.ControllerGetVolumeResponse_VolumeStatus{PublishedNodeIds: []string{"n1"}},
			},
		},
		{
			name: "ControllerExpandVolume",
			call: func(ctx context.Context, p *testProxy) (proto.Message, error) {
				return p.Controller.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{
					VolumeId: "v:a/vol-1", CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 30}, Secrets: secrets, VolumeCapability: testkit.RWO()})
			},
			wantUp: &csi.ControllerExpandVolumeRequest{
				VolumeId: "vol-1", CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 30}, Secrets: merged, VolumeCapability: testkit.RWO()},
			wantResp: &csi.ControllerExpandVolumeResponse{CapacityBytes: 2 << 30, NodeExpansionRequired: true},
		},
		{
			name: "ValidateVolumeCapabilities",
			call: func(ctx context.Context, p *testProxy) (proto.Message, error) {
				return p.Controller.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{
					VolumeId: "v:a/vol-1", VolumeCapabilities: []*csi.VolumeCapability{testkit.RWO()},
					VolumeContext: map[string]string{"from": "upstream"},
					Parameters:    map[string]string{"connection": "a", "fs": "sc"}, Secrets: secrets})
			},
			wantUp: &csi.ValidateVolumeCapabilitiesRequest{
				VolumeId: "vol-1", VolumeCapabilities: []*csi.VolumeCapability{testkit.RWO()},
				VolumeContext: map[string]string{"from": "upstream"},
				Parameters:    map[string]string{"fs": "sc", "pool": "conn-pool"}, Secrets: merged},
			// confirmed.parameters must be what the CO sent, or it would
			// see a mismatch and treat the volume as incompatible.
			wantResp: &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
				VolumeCapabilities: []*csi.VolumeCapability{testkit.RWO()},
				Parameters:         map[string]string{"connection": "a", "fs": "sc"}}},
		},
		{
			name: "CreateSnapshot",
			call: func(ctx context.Context, p *testProxy) (proto.Message, error) {
				return p.Controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{
					Name: "snap1", SourceVolumeId: "v:a/vol-1", Secrets: secrets,
					Parameters: map[string]string{"connection": "a", "class": "gold"}})
			},
			wantUp: &csi.CreateSnapshotRequest{
				Name: "snap1", SourceVolumeId: "vol-1", Secrets: merged, Parameters: map[string]string{"class": "gold"}},
			wantResp: &csi.CreateSnapshotResponse{Snapshot: &csi.Snapshot{
				SnapshotId: "s:a/snap-snap1", SourceVolumeId: "v:a/vol-1", SizeBytes: 7, ReadyToUse: true}},
		},
		{
			name: "DeleteSnapshot",
			call: func(ctx context.Context, p *testProxy) (proto.Message, error) {
				return p.Controller.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: "s:a/snap-1", Secrets: secrets})
			},
			wantUp:   &csi.DeleteSnapshotRequest{SnapshotId: "snap-1", Secrets: merged},
			wantResp: &csi.DeleteSnapshotResponse{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeUpstream(t)
			p := startProxy(t)
			p.add(t, "a", conn{
				Endpoint: f.Endpoint, Topology: entries,
				Parameters: map[string]string{"fs": "conn", "pool": "conn-pool"},
				Secrets:    map[string]string{"user": "conn-user", "password": "s3cr3t-conn"},
			})
			resp, err := tt.call(callCtx(t), p)
			if err != nil {
				t.Fatal(err)
			}
			if d := diff(tt.wantResp, resp); d != "" {
				t.Errorf("response (-want +got):\n%s", d)
			}
			if d := diff(tt.wantUp, only[proto.Message](t, f, tt.name)); d != "" {
				t.Errorf("upstream request (-want +got):\n%s", d)
			}
		})
	}
}

func TestCreateSnapshotUpstreamIDs(t *testing.T) {
	long := strings.Repeat("x", 125)
	tests := []struct {
		name       string
		resp       *csi.CreateSnapshotResponse
		wantCode   codes.Code
		wantMsg    []string
		wantDelete bool
	}{
		{
			name: "too long is rolled back", resp: &csi.CreateSnapshotResponse{Snapshot: &csi.Snapshot{SnapshotId: long, ReadyToUse: true}},
			wantCode: codes.InvalidArgument, wantDelete: true,
			wantMsg: []string{"snapshot id would be 129 bytes", "over proxy.maxIdLength 128", "upstream handle is 125 bytes", "was deleted"},
		},
		{name: "empty id", resp: &csi.CreateSnapshotResponse{Snapshot: &csi.Snapshot{}}, wantCode: codes.Internal, wantMsg: []string{"no snapshot id"}},
		{name: "no snapshot", resp: &csi.CreateSnapshotResponse{}, wantCode: codes.Internal, wantMsg: []string{"no snapshot id"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeUpstream(t)
			f.setResponse("CreateSnapshot", tt.resp)
			p := startProxy(t, withMaxIDLength(128))
			p.add(t, "a", conn{Endpoint: f.Endpoint, Secrets: map[string]string{"k": "s3cr3t-conn"}})
			_, err := p.Controller.CreateSnapshot(callCtx(t), &csi.CreateSnapshotRequest{Name: "snap1", SourceVolumeId: "v:a/vol-1"})
			testkit.WantCode(t, err, tt.wantCode, tt.wantMsg...)
			var want []proto.Message
			if tt.wantDelete {
				want = []proto.Message{&csi.DeleteSnapshotRequest{SnapshotId: long, Secrets: map[string]string{"k": "s3cr3t-conn"}}}
			}
			if d := diff(want, f.requests("DeleteSnapshot")); d != "" {
				t.Errorf("DeleteSnapshot requests (-want +got):\n%s", d)
			}
		})
	}
}

// TestMalformedIDs: an ID the proxy never made is already gone for the
// tolerant calls and NOT_FOUND for the rest; neither reaches an upstream.
func TestMalformedIDs(t *testing.T) {
	malformed := map[string]string{
		"no kind prefix":       "vol-1",
		"no separator":         "v:a",
		"empty handle":         "v:a/",
		"invalid connection":   "v:.a/vol-1",
		"path in connection":   "v:../vol-1",
		"longer than any made": "v:a/" + strings.Repeat("x", ids.MaxParsed),
		"wrong kind":           "x:a/vol-1",
		"volume/snapshot kind": "SWAP",
	}
	for _, rc := range routedCalls {
		for name, id := range malformed {
			if id == "SWAP" {
				// A snapshot ID where a volume ID belongs, and vice versa.
				id = "s:a/h"
				if rc.method == "DeleteSnapshot" {
					id = "v:a/h"
				}
			}
			t.Run(rc.method+"/"+name, func(t *testing.T) {
				f := newFakeUpstream(t)
				p := startProxy(t)
				p.add(t, "a", conn{Endpoint: f.Endpoint})
				err := rc.call(callCtx(t), p, id)
				if rc.tolerant {
					if err != nil {
						t.Fatalf("got %v, want success", err)
					}
				} else {
					testkit.WantCode(t, err, codes.NotFound)
				}
				if d := diff([]string(nil), f.routed()); d != "" {
					t.Errorf("upstream received calls (-want +got):\n%s", d)
				}
			})
		}
	}
}

// TestEmptyIDs: a missing ID is the caller's mistake, even for the
// tolerant calls.
func TestEmptyIDs(t *testing.T) {
	for _, rc := range routedCalls {
		t.Run(rc.method, func(t *testing.T) {
			p := startProxy(t)
			testkit.WantCode(t, rc.call(callCtx(t), p, ""), codes.InvalidArgument)
		})
	}
}

// TestMissingConnectionFile: a well-formed ID whose connection has no file
// fails loudly for every call, deletes included, so no storage leaks.
func TestMissingConnectionFile(t *testing.T) {
	for _, rc := range routedCalls {
		t.Run(rc.method, func(t *testing.T) {
			f := newFakeUpstream(t)
			p := startProxy(t)
			p.add(t, "gone", conn{Endpoint: f.Endpoint})
			if err := rc.call(callCtx(t), p, idOf(rc.method, "gone", "h-1")); err != nil {
				t.Fatalf("while the file exists: %v", err)
			}
			p.remove(t, "gone")
			err := rc.call(callCtx(t), p, idOf(rc.method, "gone", "h-2"))
			testkit.WantCode(t, err, codes.FailedPrecondition, `"gone"`, "gone.yaml")
		})
	}
}

// TestBrokenConnectionFile: a connection file that does not parse fails
// its own calls with the reason and leaves other connections working.
func TestBrokenConnectionFile(t *testing.T) {
	f := newFakeUpstream(t)
	p := startProxy(t)
	p.add(t, "good", conn{Endpoint: f.Endpoint})
	p.write(t, "bad", "driver: csi\ncsi:\n  endpoint: [not, a, string]\n")
	ctx := callCtx(t)
	_, err := p.Controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "v:bad/vol-1"})
	testkit.WantCode(t, err, codes.FailedPrecondition, `"bad"`, "bad.yaml")
	if _, err := p.Controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "v:good/vol-1"}); err != nil {
		t.Fatalf("other connection: %v", err)
	}
}

// TestControllerGetVolumeDecoration: the volume comes back under the
// proxy's IDs and the connection's topology, whatever the upstream said.
func TestControllerGetVolumeDecoration(t *testing.T) {
	upstreamVol := &csi.Volume{
		VolumeId: "vol-1", CapacityBytes: 10, AccessibleTopology: upstreamTopology,
		ContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: "snap-0"}}},
	}
	tests := []struct {
		name    string
		entries []accessible.Entry
		want    *csi.Volume
	}{
		{
			name: "no topology list: reachable everywhere",
			want: &csi.Volume{VolumeId: "v:a/vol-1", CapacityBytes: 10,
				ContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
					Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: "s:a/snap-0"}}}},
		},
		{
			name: "topology list",
			entries: []accessible.Entry{
				{Requirements: map[string]string{"zone": "z1"}},
				{Requirements: map[string]string{"zone": "z2"}, Extra: map[string]string{"example.com/tier": "fast"}},
			},
			want: &csi.Volume{VolumeId: "v:a/vol-1", CapacityBytes: 10,
				AccessibleTopology: []*csi.Topology{topo(testPrefix+"/zone", "z1"), topo(testPrefix+"/zone", "z2", "example.com/tier", "fast")},
				ContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
					Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: "s:a/snap-0"}}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeUpstream(t)
			f.setResponse("ControllerGetVolume", &csi.ControllerGetVolumeResponse{Volume: upstreamVol})
			p := startProxy(t)
			p.add(t, "a", conn{Endpoint: f.Endpoint, Topology: tt.entries})
			resp, err := p.Controller.ControllerGetVolume(callCtx(t), &csi.ControllerGetVolumeRequest{VolumeId: "v:a/vol-1"})
			if err != nil {
				t.Fatal(err)
			}
			if d := diff(tt.want, resp.GetVolume()); d != "" {
				t.Errorf("volume (-want +got):\n%s", d)
			}
		})
	}
}

// TestValidateVolumeCapabilitiesUnconfirmed: an upstream's refusal reaches
// the CO as it is.
func TestValidateVolumeCapabilitiesUnconfirmed(t *testing.T) {
	f := newFakeUpstream(t)
	want := &csi.ValidateVolumeCapabilitiesResponse{Message: "block access is not supported"}
	f.setResponse("ValidateVolumeCapabilities", want)
	p := startProxy(t)
	p.add(t, "a", conn{Endpoint: f.Endpoint})
	resp, err := p.Controller.ValidateVolumeCapabilities(callCtx(t), &csi.ValidateVolumeCapabilitiesRequest{
		VolumeId: "v:a/vol-1", VolumeCapabilities: []*csi.VolumeCapability{testkit.RWO()},
		Parameters: map[string]string{"connection": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(want, resp); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}
