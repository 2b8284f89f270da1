package csi

import (
	"context"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/ids"
)

// MaxNodeIDLength is the CSI limit on node_id (spec: 256 bytes).
const MaxNodeIDLength = 256

// ControllerPublishVolume forwards with node_id translated by the
// connection's nodeId.template. An upstream without controller publishing
// needs no attach step, so the call succeeds with an empty context.
func (d *Driver) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	if !d.advertises(csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME) {
		return nil, status.Error(codes.Unimplemented, "controller publishing is off (proxy.controllerPublish)")
	}
	if req.GetNodeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "node_id is required")
	}
	if req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_capability is required")
	}
	c, id, _, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId(), false)
	if err != nil {
		return nil, err
	}
	nodeID, err := upstreamNodeID(c.Name, c.Config.Proxy.PerDriver.NodeID.Render(req.GetNodeId()))
	if err != nil {
		return nil, err
	}
	ok, err := controllerHas(ctx, c, csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME)
	if err != nil {
		return nil, err
	}
	if !ok {
		return &csi.ControllerPublishVolumeResponse{}, nil
	}
	out := shallowCopy(req)
	out.VolumeId, out.NodeId = id.Handle, nodeID
	out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
	return forward(ctx, c, c.Controller, "ControllerPublishVolume", out, c.Controller.Controller.ControllerPublishVolume)
}

// ControllerUnpublishVolume mirrors ControllerPublishVolume; an empty
// node_id (unpublish everywhere) is passed on empty.
func (d *Driver) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	if !d.advertises(csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME) {
		return nil, status.Error(codes.Unimplemented, "controller publishing is off (proxy.controllerPublish)")
	}
	c, id, ok, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId(), true)
	if !ok {
		return &csi.ControllerUnpublishVolumeResponse{}, err
	}
	var nodeID string
	if req.GetNodeId() != "" {
		if nodeID, err = upstreamNodeID(c.Name, c.Config.Proxy.PerDriver.NodeID.Render(req.GetNodeId())); err != nil {
			return nil, err
		}
	}
	has, err := controllerHas(ctx, c, csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME)
	if err != nil {
		return nil, err
	}
	if !has {
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	out := shallowCopy(req)
	out.VolumeId, out.NodeId = id.Handle, nodeID
	out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
	return forward(ctx, c, c.Controller, "ControllerUnpublishVolume", out, c.Controller.Controller.ControllerUnpublishVolume)
}

func upstreamNodeID(conn, id string) (string, error) {
	if len(id) > MaxNodeIDLength {
		return "", status.Errorf(codes.InvalidArgument, "connection %q: node id %q rendered by proxy.perDriver.nodeId.template is %d bytes, over the CSI limit of %d",
			conn, truncate(id, 64), len(id), MaxNodeIDLength)
	}
	return id, nil
}

// ControllerModifyVolume forwards mutable_parameters by volume ID.
func (d *Driver) ControllerModifyVolume(ctx context.Context, req *csi.ControllerModifyVolumeRequest) (*csi.ControllerModifyVolumeResponse, error) {
	c, id, _, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId(), false)
	if err != nil {
		return nil, err
	}
	if len(req.GetMutableParameters()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "mutable_parameters are required")
	}
	if err := requireController(ctx, c, csi.ControllerServiceCapability_RPC_MODIFY_VOLUME, "ControllerModifyVolume"); err != nil {
		return nil, err
	}
	out := shallowCopy(req)
	out.VolumeId = id.Handle
	out.MutableParameters = mergeParameters(nil, req.GetMutableParameters())
	out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
	return forward(ctx, c, c.Controller, "ControllerModifyVolume", out, c.Controller.Controller.ControllerModifyVolume)
}

// GetSnapshot routes by snapshot ID.
func (d *Driver) GetSnapshot(ctx context.Context, req *csi.GetSnapshotRequest) (*csi.GetSnapshotResponse, error) {
	c, id, _, err := d.route(ctx, ids.Snapshot, "snapshot_id", req.GetSnapshotId(), false)
	if err != nil {
		return nil, err
	}
	if err := requireController(ctx, c, csi.ControllerServiceCapability_RPC_GET_SNAPSHOT, "GetSnapshot"); err != nil {
		return nil, err
	}
	out := shallowCopy(req)
	out.SnapshotId = id.Handle
	out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
	resp, err := forward(ctx, c, c.Controller, "GetSnapshot", out, c.Controller.Controller.GetSnapshot)
	if err != nil {
		return nil, err
	}
	if s := resp.GetSnapshot(); s != nil {
		wrapSnapshot(ctx, d, c, s)
	}
	return resp, nil
}

// ControllerGetVolumeHealth routes by volume ID.
func (d *Driver) ControllerGetVolumeHealth(ctx context.Context, req *csi.ControllerGetVolumeHealthRequest) (*csi.ControllerGetVolumeHealthResponse, error) {
	c, id, _, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId(), false)
	if err != nil {
		return nil, err
	}
	if err := requireController(ctx, c, csi.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH, "ControllerGetVolumeHealth"); err != nil {
		return nil, err
	}
	out := shallowCopy(req)
	out.VolumeId = id.Handle
	out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
	resp, err := forward(ctx, c, c.Controller, "ControllerGetVolumeHealth", out, c.Controller.Controller.ControllerGetVolumeHealth)
	if err != nil {
		return nil, err
	}
	if h := resp.GetVolumeHealth(); h != nil {
		h.VolumeId = req.GetVolumeId()
	}
	return resp, nil
}

// NodeGetVolumeHealth routes by volume ID to the node upstream.
func (d *Driver) NodeGetVolumeHealth(ctx context.Context, req *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	c, id, _, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId(), false)
	if err != nil {
		return nil, err
	}
	if err := requireNode(ctx, c, csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH, "NodeGetVolumeHealth"); err != nil {
		return nil, err
	}
	out := shallowCopy(req)
	out.VolumeId = id.Handle
	if out.StagingTargetPath, err = upstreamStagingPath(ctx, c, req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	resp, err := forward(ctx, c, c.Node, "NodeGetVolumeHealth", out, c.Node.Node.NodeGetVolumeHealth)
	if err != nil {
		return nil, err
	}
	if h := resp.GetVolumeHealth(); h != nil {
		h.VolumeId = req.GetVolumeId()
	}
	return resp, nil
}
