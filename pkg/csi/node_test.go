package csi_test

import (
	"context"
	"errors"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
)

func stageReq(id string) *csi.NodeStageVolumeRequest {
	return &csi.NodeStageVolumeRequest{
		VolumeId: id, StagingTargetPath: "/var/lib/kubelet/staging/pv-1", VolumeCapability: testkit.RWO(),
		PublishContext: map[string]string{"lun": "3"}, VolumeContext: map[string]string{"from": "upstream"},
		Secrets: map[string]string{"chap": "s3cr3t-chap"},
	}
}

func publishReq(id string) *csi.NodePublishVolumeRequest {
	return &csi.NodePublishVolumeRequest{
		VolumeId: id, StagingTargetPath: "/var/lib/kubelet/staging/pv-1", TargetPath: "/var/lib/kubelet/pods/p/vol",
		VolumeCapability: testkit.RWO(), Readonly: true,
		PublishContext: map[string]string{"lun": "3"}, VolumeContext: map[string]string{"from": "upstream"},
		Secrets: map[string]string{"chap": "s3cr3t-chap"},
	}
}

// TestNodeStagingEmulated: for an upstream without STAGE_UNSTAGE_VOLUME the
// proxy stages nothing and publishes without a staging path.
func TestNodeStagingEmulated(t *testing.T) {
	f := newFakeUpstream(t, withNodeCaps(csi.NodeServiceCapability_RPC_GET_VOLUME_STATS))
	p := startProxy(t)
	p.add(t, "nfs", conn{Endpoint: f.Endpoint})
	ctx := callCtx(t)

	if _, err := p.Node.NodeStageVolume(ctx, stageReq("v:nfs/share-1")); err != nil {
		t.Fatalf("NodeStageVolume: %v", err)
	}
	if _, err := p.Node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{
		VolumeId: "v:nfs/share-1", StagingTargetPath: "/var/lib/kubelet/staging/pv-1"}); err != nil {
		t.Fatalf("NodeUnstageVolume: %v", err)
	}
	if got := f.routed(); len(got) != 0 {
		t.Fatalf("stage/unstage reached the upstream: %v", got)
	}

	req := publishReq("v:nfs/share-1")
	before := proto.Clone(req)
	// In-process, to see that the inbound request keeps its staging path.
	if _, err := p.Driver.NodePublishVolume(ctx, req); err != nil {
		t.Fatalf("NodePublishVolume: %v", err)
	}
	if d := diff(before, req); d != "" {
		t.Errorf("inbound request was mutated (-before +after):\n%s", d)
	}
	want := publishReq("share-1")
	want.StagingTargetPath = ""
	if d := diff(want, only[*csi.NodePublishVolumeRequest](t, f, "NodePublishVolume")); d != "" {
		t.Errorf("upstream NodePublishVolume (-want +got):\n%s", d)
	}

	// Stats and expansion name the staging path too; nothing is there.
	if _, err := p.Node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{
		VolumeId: "v:nfs/share-1", VolumePath: "/t", StagingTargetPath: "/var/lib/kubelet/staging/pv-1"}); err != nil {
		t.Fatalf("NodeGetVolumeStats: %v", err)
	}
	if d := diff(&csi.NodeGetVolumeStatsRequest{VolumeId: "share-1", VolumePath: "/t"},
		only[*csi.NodeGetVolumeStatsRequest](t, f, "NodeGetVolumeStats")); d != "" {
		t.Errorf("upstream NodeGetVolumeStats (-want +got):\n%s", d)
	}
}

// TestNodeExpandWithoutStaging: NodeExpandVolume to an upstream that
// expands but does not stage goes without the staging path.
func TestNodeExpandWithoutStaging(t *testing.T) {
	f := newFakeUpstream(t, withNodeCaps(csi.NodeServiceCapability_RPC_EXPAND_VOLUME))
	p := startProxy(t)
	p.add(t, "a", conn{Endpoint: f.Endpoint})
	if _, err := p.Node.NodeExpandVolume(callCtx(t), &csi.NodeExpandVolumeRequest{
		VolumeId: "v:a/vol-1", VolumePath: "/t", StagingTargetPath: "/s"}); err != nil {
		t.Fatal(err)
	}
	if d := diff(&csi.NodeExpandVolumeRequest{VolumeId: "vol-1", VolumePath: "/t"},
		only[*csi.NodeExpandVolumeRequest](t, f, "NodeExpandVolume")); d != "" {
		t.Errorf("upstream NodeExpandVolume (-want +got):\n%s", d)
	}
}

// TestNodeStagingForwarded: for an upstream that stages, node calls reach
// it unchanged but for the volume id.
func TestNodeStagingForwarded(t *testing.T) {
	tests := []struct {
		method string
		call   func(context.Context, *testProxy) (proto.Message, error)
		wantUp proto.Message
		want   proto.Message
	}{
		{
			method: "NodeStageVolume",
			call: func(ctx context.Context, p *testProxy) (proto.Message, error) {
				return p.Node.NodeStageVolume(ctx, stageReq("v:blk/lun-1"))
			},
			wantUp: stageReq("lun-1"), want: &csi.NodeStageVolumeResponse{},
		},
		{
			method: "NodeUnstageVolume",
			call: func(ctx context.Context, p *testProxy) (proto.Message, error) {
				return p.Node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "v:blk/lun-1", StagingTargetPath: "/s"})
			},
			wantUp: &csi.NodeUnstageVolumeRequest{VolumeId: "lun-1", StagingTargetPath: "/s"}, want: &csi.NodeUnstageVolumeResponse{},
		},
		{
			method: "NodePublishVolume",
			call: func(ctx context.Context, p *testProxy) (proto.Message, error) {
				return p.Node.NodePublishVolume(ctx, publishReq("v:blk/lun-1"))
			},
			wantUp: publishReq("lun-1"), want: &csi.NodePublishVolumeResponse{},
		},
		{
			method: "NodeUnpublishVolume",
			call: func(ctx context.Context, p *testProxy) (proto.Message, error) {
				return p.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "v:blk/lun-1", TargetPath: "/t"})
			},
			wantUp: &csi.NodeUnpublishVolumeRequest{VolumeId: "lun-1", TargetPath: "/t"}, want: &csi.NodeUnpublishVolumeResponse{},
		},
		{
			method: "NodeGetVolumeStats",
			call: func(ctx context.Context, p *testProxy) (proto.Message, error) {
				return p.Node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "v:blk/lun-1", VolumePath: "/t", StagingTargetPath: "/s"})
			},
			wantUp: &csi.NodeGetVolumeStatsRequest{VolumeId: "lun-1", VolumePath: "/t", StagingTargetPath: "/s"},
			want: &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
				{Total: 100, Used: 40, Available: 60, Unit: csi.VolumeUsage_BYTES}}},
		},
		{
			method: "NodeExpandVolume",
			call: func(ctx context.Context, p *testProxy) (proto.Message, error) {
				return p.Node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{
					VolumeId: "v:blk/lun-1", VolumePath: "/t", CapacityRange: &csi.CapacityRange{RequiredBytes: 9}, VolumeCapability: testkit.RWO()})
			},
			wantUp: &csi.NodeExpandVolumeRequest{
				VolumeId: "lun-1", VolumePath: "/t", CapacityRange: &csi.CapacityRange{RequiredBytes: 9}, VolumeCapability: testkit.RWO()},
			want: &csi.NodeExpandVolumeResponse{CapacityBytes: 9},
		},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			ctrl, node := newFakeUpstream(t), newFakeUpstream(t)
			p := startProxy(t)
			p.add(t, "blk", conn{Endpoint: ctrl.Endpoint, NodeEndpoint: node.Endpoint})
			resp, err := tt.call(callCtx(t), p)
			if err != nil {
				t.Fatal(err)
			}
			if d := diff(tt.want, resp); d != "" {
				t.Errorf("response (-want +got):\n%s", d)
			}
			if d := diff(tt.wantUp, only[proto.Message](t, node, tt.method)); d != "" {
				t.Errorf("upstream request (-want +got):\n%s", d)
			}
			if got := ctrl.routed(); len(got) != 0 {
				t.Errorf("node call reached the controller endpoint: %v", got)
			}
		})
	}
}

// TestNodeSecretsMerged: the connection's secrets reach node calls that
// carry secrets, under the request's.
func TestNodeSecretsMerged(t *testing.T) {
	f := newFakeUpstream(t)
	p := startProxy(t)
	p.add(t, "a", conn{Endpoint: f.Endpoint, Secrets: map[string]string{"chap": "s3cr3t-conn", "user": "u"}})
	if _, err := p.Node.NodeStageVolume(callCtx(t), stageReq("v:a/lun-1")); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"chap": "s3cr3t-chap", "user": "u"}
	if d := diff(want, only[*csi.NodeStageVolumeRequest](t, f, "NodeStageVolume").GetSecrets()); d != "" {
		t.Errorf("secrets (-want +got):\n%s", d)
	}
}

func TestNodeGetInfo(t *testing.T) {
	tests := []struct {
		name     string
		opts     func(*pcsi.Options)
		want     *csi.NodeGetInfoResponse
		wantCode codes.Code
		wantMsg  []string
	}{
		{
			name: "segments",
			opts: func(o *pcsi.Options) {
				o.NodeSegments = map[string]string{testPrefix + "/zone": "z1", "topology.kubernetes.io/region": "r1"}
				o.MaxVolumesPerNode = 16
			},
			want: &csi.NodeGetInfoResponse{NodeId: "node-1", MaxVolumesPerNode: 16, AccessibleTopology: topo(
				testPrefix+"/zone", "z1", "topology.kubernetes.io/region", "r1")},
		},
		{name: "no segments", opts: func(*pcsi.Options) {}, want: &csi.NodeGetInfoResponse{NodeId: "node-1"}},
		{
			name: "no segment from any rule",
			opts: func(o *pcsi.Options) {
				o.NodeTopologyErr = errors.New("no topology segment: rule 0 (zone): env ZONE is not set")
			},
			wantCode: codes.FailedPrecondition, wantMsg: []string{"rule 0 (zone): env ZONE is not set"},
		},
		{
			name:     "status error keeps its code",
			opts:     func(o *pcsi.Options) { o.NodeTopologyErr = status.Error(codes.Unavailable, "labels not read yet") },
			wantCode: codes.Unavailable, wantMsg: []string{"labels not read yet"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := startProxy(t, tt.opts)
			resp, err := p.Node.NodeGetInfo(callCtx(t), &csi.NodeGetInfoRequest{})
			if tt.wantCode != codes.OK {
				testkit.WantCode(t, err, tt.wantCode, tt.wantMsg...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := diff(tt.want, resp); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// TestNodeValidation: a request the proxy answers itself (here: an ID it
// never made) missing a required field is refused with INVALID_ARGUMENT
// naming the field, before NOT_FOUND and without asking any upstream. A
// request it can route goes to the upstream whatever it lacks
// (forwarded_fields_test.go).
func TestNodeValidation(t *testing.T) {
	const id = "not-made-by-the-proxy"
	tests := []struct {
		name  string
		call  func(context.Context, csi.NodeClient) error
		field string
	}{
		{"stage/volume_id", func(ctx context.Context, c csi.NodeClient) error {
			_, err := c.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{StagingTargetPath: "/s", VolumeCapability: testkit.RWO()})
			return err
		}, "volume_id"},
		{"stage/staging_target_path", func(ctx context.Context, c csi.NodeClient) error {
			_, err := c.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, VolumeCapability: testkit.RWO()})
			return err
		}, "staging_target_path"},
		{"stage/volume_capability", func(ctx context.Context, c csi.NodeClient) error {
			_, err := c.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: "/s"})
			return err
		}, "volume_capability"},
		{"unstage/volume_id", func(ctx context.Context, c csi.NodeClient) error {
			_, err := c.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{StagingTargetPath: "/s"})
			return err
		}, "volume_id"},
		{"unstage/staging_target_path", func(ctx context.Context, c csi.NodeClient) error {
			_, err := c.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id})
			return err
		}, "staging_target_path"},
		{"publish/volume_id", func(ctx context.Context, c csi.NodeClient) error {
			_, err := c.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{TargetPath: "/t", VolumeCapability: testkit.RWO()})
			return err
		}, "volume_id"},
		{"publish/target_path", func(ctx context.Context, c csi.NodeClient) error {
			_, err := c.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, VolumeCapability: testkit.RWO()})
			return err
		}, "target_path"},
		{"publish/volume_capability", func(ctx context.Context, c csi.NodeClient) error {
			_, err := c.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, TargetPath: "/t"})
			return err
		}, "volume_capability"},
		{"unpublish/volume_id", func(ctx context.Context, c csi.NodeClient) error {
			_, err := c.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{TargetPath: "/t"})
			return err
		}, "volume_id"},
		{"unpublish/target_path", func(ctx context.Context, c csi.NodeClient) error {
			_, err := c.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id})
			return err
		}, "target_path"},
		{"stats/volume_id", func(ctx context.Context, c csi.NodeClient) error {
			_, err := c.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumePath: "/t"})
			return err
		}, "volume_id"},
		{"stats/volume_path", func(ctx context.Context, c csi.NodeClient) error {
			_, err := c.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id})
			return err
		}, "volume_path"},
		{"expand/volume_id", func(ctx context.Context, c csi.NodeClient) error {
			_, err := c.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumePath: "/t"})
			return err
		}, "volume_id"},
		{"expand/volume_path", func(ctx context.Context, c csi.NodeClient) error {
			_, err := c.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id})
			return err
		}, "volume_path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeUpstream(t)
			p := startProxy(t)
			p.add(t, "a", conn{Endpoint: f.Endpoint})
			testkit.WantCode(t, tt.call(callCtx(t), p.Node), codes.InvalidArgument, tt.field)
			if got := f.routed(); len(got) != 0 {
				t.Errorf("upstream received %v", got)
			}
		})
	}
}
