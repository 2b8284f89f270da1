package csi

import (
	"context"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/backend"
	"github.com/democratic-csi/proxy-topology/pkg/ids"
)

// MaxNodeIDLength is the CSI limit on node_id (spec: 256 bytes).
const MaxNodeIDLength = 256

// ControllerPublishVolume forwards with node_id translated by the
// connection's nodeId.template. An upstream without controller publishing
// needs no attach step, so the call succeeds with an empty context (the
// proxy answers, so it checks the request; see missing).
func (d *Driver) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	if !d.advertises(csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME) {
		return nil, status.Error(codes.Unimplemented, "controller publishing is off (proxy.controllerPublish)")
	}
	fields := []field{
		{"node_id", req.GetNodeId() == ""},
		{"volume_capability", req.GetVolumeCapability() == nil},
	}
	t, release, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId())
	if err != nil {
		return nil, orMissing(err, fields...)
	}
	defer release()
	c := t.conn
	ok, err := controllerHas(ctx, c, csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME)
	if err != nil {
		return nil, err
	}
	if !ok {
		if err := missing(fields...); err != nil {
			return nil, err
		}
		return &csi.ControllerPublishVolumeResponse{}, nil
	}
	// An empty node_id goes on empty, for the upstream to refuse: a
	// template would render it into a node id that looks valid.
	var nodeID string
	if req.GetNodeId() != "" {
		if nodeID, err = upstreamNodeID(c, req.GetNodeId()); err != nil {
			return nil, err
		}
	}
	out := outbound(req)
	out.VolumeId, out.NodeId = t.handle, nodeID
	out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
	return forward(ctx, c, c.Controller, "ControllerPublishVolume", out, c.Controller.Controller.ControllerPublishVolume)
}

// ControllerUnpublishVolume mirrors ControllerPublishVolume; an empty
// node_id (unpublish everywhere) is passed on empty.
func (d *Driver) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	if !d.advertises(csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME) {
		return nil, status.Error(codes.Unimplemented, "controller publishing is off (proxy.controllerPublish)")
	}
	t, release, err := d.routeRemoval(ctx, ids.Volume, "volume_id", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	defer release()
	if t == nil {
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	c := t.conn
	var nodeID string
	if req.GetNodeId() != "" {
		if nodeID, err = upstreamNodeID(c, req.GetNodeId()); err != nil {
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
	out := outbound(req)
	out.VolumeId, out.NodeId = t.handle, nodeID
	out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
	return forward(ctx, c, c.Controller, "ControllerUnpublishVolume", out, c.Controller.Controller.ControllerUnpublishVolume)
}

// upstreamNodeID renders the node id the connection's upstream expects
// for a node name (proxy.perDriver.nodeId.template).
func upstreamNodeID(c *backend.Conn, nodeName string) (string, error) {
	id := c.Config.Proxy.PerDriver.NodeID.Render(nodeName)
	if len(id) > MaxNodeIDLength {
		return "", status.Errorf(codes.InvalidArgument, "connection %q: node id %q rendered by proxy.perDriver.nodeId.template is %d bytes, over the CSI limit of %d",
			c.Name, truncate(id, 64), len(id), MaxNodeIDLength)
	}
	return id, nil
}

// nodeNames maps upstream node ids back to node names with the
// connection's node id template; ids of another shape are kept as they are.
func nodeNames(c *backend.Conn, upstreamIDs []string) []string {
	for i, id := range upstreamIDs {
		if name, ok := c.Config.Proxy.PerDriver.NodeID.Parse(id); ok {
			upstreamIDs[i] = name
		}
	}
	return upstreamIDs
}
