package csi

import (
	"context"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/backend"
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

// HeaderNotStaged is the gRPC response header NodeStageVolume sets, to
// the connection's name, when it answers OK without staging because the
// connection's upstream does not stage (SPEC §6). CSI has no field for it,
// and the CO needs none (NodePublishVolume then drops the staging path);
// the CLI's stage reads it to say that nothing was mounted.
const HeaderNotStaged = "x-proxy-topology-not-staged"

// NodeStageVolume forwards to upstreams that stage and succeeds without a
// call for those that do not (checking the request itself then, since it
// answers, and saying so in HeaderNotStaged).
func (d *Driver) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	fields := []field{
		{"staging_target_path", req.GetStagingTargetPath() == ""},
		{"volume_capability", req.GetVolumeCapability() == nil},
	}
	t, release, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId())
	if err != nil {
		return nil, orMissing(err, fields...)
	}
	defer release()
	c := t.conn
	stages, err := nodeHas(ctx, c, csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	if err != nil {
		return nil, err
	}
	if !stages {
		if err := missing(fields...); err != nil {
			return nil, err
		}
		// Outside a gRPC server (a direct call) there is no header to set.
		_ = grpc.SetHeader(ctx, metadata.Pairs(HeaderNotStaged, c.Name))
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
	path := field{"staging_target_path", req.GetStagingTargetPath() == ""}
	t, release, err := d.routeRemoval(ctx, ids.Volume, "volume_id", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	defer release()
	if t == nil {
		return unstaged(path)
	}
	c := t.conn
	stages, err := nodeHas(ctx, c, csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	if err != nil {
		return nil, err
	}
	if !stages {
		return unstaged(path)
	}
	out := outbound(req)
	out.VolumeId = t.handle
	return forward(ctx, c, c.Node, "NodeUnstageVolume", out, c.Node.Node.NodeUnstageVolume)
}

// unstaged answers a NodeUnstageVolume the proxy answers itself.
func unstaged(path field) (*csi.NodeUnstageVolumeResponse, error) {
	if err := missing(path); err != nil {
		return nil, err
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// NodePublishVolume forwards; for an upstream that does not stage, the
// staging path the CO sent is dropped, since nothing was staged there.
func (d *Driver) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	t, release, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId())
	if err != nil {
		return nil, orMissing(err,
			field{"target_path", req.GetTargetPath() == ""},
			field{"volume_capability", req.GetVolumeCapability() == nil})
	}
	defer release()
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
	t, release, err := d.routeRemoval(ctx, ids.Volume, "volume_id", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	defer release()
	if t == nil {
		if err := missing(field{"target_path", req.GetTargetPath() == ""}); err != nil {
			return nil, err
		}
		return &csi.NodeUnpublishVolumeResponse{}, nil
	}
	c := t.conn
	out := outbound(req)
	out.VolumeId = t.handle
	return forward(ctx, c, c.Node, "NodeUnpublishVolume", out, c.Node.Node.NodeUnpublishVolume)
}

// NodeGetVolumeStats routes by ID.
func (d *Driver) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	t, release, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId())
	if err != nil {
		return nil, orMissing(err, field{"volume_path", req.GetVolumePath() == ""})
	}
	defer release()
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
	t, release, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId())
	if err != nil {
		return nil, orMissing(err, field{"volume_path", req.GetVolumePath() == ""})
	}
	defer release()
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
func upstreamStagingPath(ctx context.Context, c *backend.Conn, path string) (string, error) {
	if path == "" {
		return "", nil
	}
	stages, err := nodeHas(ctx, c, csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	if err != nil || !stages {
		return "", err
	}
	return path, nil
}

// What the proxy checks in a request. A call it forwards is checked for
// nothing but what routing needs (the ID): every other field, REQUIRED or
// not, is the upstream's to judge, and its answer stands, so the proxy
// adds no check the upstream does not make. A call the proxy answers
// itself (an ID it never made, staging it emulates, a publish the upstream
// does not need) is checked as the CSI spec asks of any driver: a missing
// REQUIRED field is INVALID_ARGUMENT, before NOT_FOUND, in the order
// csi-sanity expects.

// field is a REQUIRED request field and whether it is empty.
type field struct {
	name  string
	empty bool
}

// missing returns INVALID_ARGUMENT naming the first empty field, or nil.
func missing(fields ...field) error {
	for _, f := range fields {
		if f.empty {
			return status.Errorf(codes.InvalidArgument, "%s is required", f.name)
		}
	}
	return nil
}

// orMissing is the answer to a call whose ID could not be routed: an ID the
// proxy never made (NOT_FOUND) still loses to a missing REQUIRED field,
// as it would at a driver that checks its arguments before it looks the
// volume up. Any other routing error is returned as it is.
func orMissing(err error, fields ...field) error {
	if status.Code(err) == codes.NotFound {
		if m := missing(fields...); m != nil {
			return m
		}
	}
	return err
}
