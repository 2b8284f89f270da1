package csi

import (
	"context"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/connection"
	"github.com/democratic-csi/proxy-topology/pkg/ids"
)

// NodeGetInfo reports the node's topology segments. A node with none fails
// here, loudly, rather than registering with labels that can never change.
func (d *Driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	if err := d.opts.NodeTopologyErr; err != nil {
		if _, ok := status.FromError(err); ok {
			return nil, err
		}
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	resp := &csi.NodeGetInfoResponse{NodeId: d.opts.NodeID, MaxVolumesPerNode: d.opts.MaxVolumesPerNode}
	if len(d.opts.NodeSegments) > 0 {
		resp.AccessibleTopology = &csi.Topology{Segments: d.opts.NodeSegments}
	}
	return resp, nil
}

// NodeStageVolume forwards to upstreams that stage and succeeds without a
// call for those that do not.
func (d *Driver) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	if req.GetStagingTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "staging_target_path is required")
	}
	if req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_capability is required")
	}
	t, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	c := t.conn
	stages, err := nodeHas(ctx, c, csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	if err != nil {
		return nil, err
	}
	if !stages {
		return &csi.NodeStageVolumeResponse{}, nil
	}
	out := outbound(req)
	out.VolumeId = t.handle
	out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
	return forward(ctx, c, c.Node, "NodeStageVolume", out, c.Node.Node.NodeStageVolume)
}

// NodeUnstageVolume mirrors NodeStageVolume; an ID the proxy never made has
// nothing staged.
func (d *Driver) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	if req.GetStagingTargetPath() == "" && req.GetVolumeId() != "" {
		return nil, status.Error(codes.InvalidArgument, "staging_target_path is required")
	}
	t, err := d.routeRemoval(ctx, ids.Volume, "volume_id", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if t == nil {
		return &csi.NodeUnstageVolumeResponse{}, nil
	}
	c := t.conn
	stages, err := nodeHas(ctx, c, csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	if err != nil {
		return nil, err
	}
	if !stages {
		return &csi.NodeUnstageVolumeResponse{}, nil
	}
	out := outbound(req)
	out.VolumeId = t.handle
	return forward(ctx, c, c.Node, "NodeUnstageVolume", out, c.Node.Node.NodeUnstageVolume)
}

// NodePublishVolume forwards; for an upstream that does not stage, the
// staging path the CO sent is dropped, since nothing was staged there.
func (d *Driver) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	if req.GetTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "target_path is required")
	}
	if req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_capability is required")
	}
	t, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	c := t.conn
	stages, err := nodeHas(ctx, c, csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	if err != nil {
		return nil, err
	}
	out := outbound(req)
	out.VolumeId = t.handle
	out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
	if !stages {
		out.StagingTargetPath = ""
	}
	return forward(ctx, c, c.Node, "NodePublishVolume", out, c.Node.Node.NodePublishVolume)
}

// NodeUnpublishVolume routes by ID; an ID the proxy never made has nothing
// published.
func (d *Driver) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if req.GetTargetPath() == "" && req.GetVolumeId() != "" {
		return nil, status.Error(codes.InvalidArgument, "target_path is required")
	}
	t, err := d.routeRemoval(ctx, ids.Volume, "volume_id", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if t == nil {
		return &csi.NodeUnpublishVolumeResponse{}, nil
	}
	c := t.conn
	out := outbound(req)
	out.VolumeId = t.handle
	return forward(ctx, c, c.Node, "NodeUnpublishVolume", out, c.Node.Node.NodeUnpublishVolume)
}

// NodeGetVolumeStats routes by ID.
func (d *Driver) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	if req.GetVolumeId() != "" && req.GetVolumePath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_path is required")
	}
	t, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	c := t.conn
	if err := requireNode(ctx, c, csi.NodeServiceCapability_RPC_GET_VOLUME_STATS, "NodeGetVolumeStats"); err != nil {
		return nil, err
	}
	out := outbound(req)
	out.VolumeId = t.handle
	if out.StagingTargetPath, err = upstreamStagingPath(ctx, c, req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	return forward(ctx, c, c.Node, "NodeGetVolumeStats", out, c.Node.Node.NodeGetVolumeStats)
}

// NodeExpandVolume routes by ID.
func (d *Driver) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	if req.GetVolumeId() != "" && req.GetVolumePath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_path is required")
	}
	t, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	c := t.conn
	if err := requireNode(ctx, c, csi.NodeServiceCapability_RPC_EXPAND_VOLUME, "NodeExpandVolume"); err != nil {
		return nil, err
	}
	out := outbound(req)
	out.VolumeId = t.handle
	out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
	if out.StagingTargetPath, err = upstreamStagingPath(ctx, c, req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	return forward(ctx, c, c.Node, "NodeExpandVolume", out, c.Node.Node.NodeExpandVolume)
}

// upstreamStagingPath is the staging path to pass on: none for an upstream
// that does not stage, since the proxy staged nothing at the path the CO
// sends (as in NodePublishVolume).
func upstreamStagingPath(ctx context.Context, c *connection.Connection, path string) (string, error) {
	if path == "" {
		return "", nil
	}
	stages, err := nodeHas(ctx, c, csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	if err != nil || !stages {
		return "", err
	}
	return path, nil
}
