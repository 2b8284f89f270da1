package csi

import (
	"context"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/ids"
)

// DeleteVolume routes by ID; an ID the proxy never made is already gone.
func (d *Driver) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	t, err := d.routeRemoval(ctx, ids.Volume, "volume_id", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if t == nil {
		return &csi.DeleteVolumeResponse{}, nil
	}
	c := t.conn
	if err := requireController(ctx, c, csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, "DeleteVolume"); err != nil {
		return nil, err
	}
	out := outbound(req)
	out.VolumeId = t.handle
	out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
	return forward(ctx, c, c.Controller, "DeleteVolume", out, c.Controller.Controller.DeleteVolume)
}

// ValidateVolumeCapabilities routes by ID and reports the request's own
// parameters as confirmed (the upstream never saw the connection one).
func (d *Driver) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	t, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume_capabilities are required")
	}
	c := t.conn
	out := outbound(req)
	out.VolumeId = t.handle
	out.Parameters = mergeParameters(c.Config.CSI.Parameters, req.GetParameters())
	out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
	resp, err := forward(ctx, c, c.Controller, "ValidateVolumeCapabilities", out, c.Controller.Controller.ValidateVolumeCapabilities)
	if err != nil {
		return nil, err
	}
	if conf := resp.GetConfirmed(); conf != nil {
		conf.Parameters = req.GetParameters()
	}
	return resp, nil
}

// ControllerGetVolume routes by ID and decorates the volume with the
// connection's topology; upstream topology keys never reach the CO.
func (d *Driver) ControllerGetVolume(ctx context.Context, req *csi.ControllerGetVolumeRequest) (*csi.ControllerGetVolumeResponse, error) {
	t, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	c := t.conn
	if err := requireController(ctx, c, csi.ControllerServiceCapability_RPC_GET_VOLUME, "ControllerGetVolume"); err != nil {
		return nil, err
	}
	out := outbound(req)
	out.VolumeId = t.handle
	resp, err := forward(ctx, c, c.Controller, "ControllerGetVolume", out, c.Controller.Controller.ControllerGetVolume)
	if err != nil {
		return nil, err
	}
	if vol := resp.GetVolume(); vol != nil {
		vol.VolumeId = req.GetVolumeId()
		vol.AccessibleTopology = d.existingTopology(c)
		if src := vol.GetContentSource(); src != nil {
			vol.ContentSource = wrapSource(c, src)
		}
	}
	return resp, nil
}

// ControllerExpandVolume routes by ID.
func (d *Driver) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	t, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if req.GetCapacityRange() == nil {
		return nil, status.Error(codes.InvalidArgument, "capacity_range is required")
	}
	c := t.conn
	if err := requireController(ctx, c, csi.ControllerServiceCapability_RPC_EXPAND_VOLUME, "ControllerExpandVolume"); err != nil {
		return nil, err
	}
	out := outbound(req)
	out.VolumeId = t.handle
	out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
	return forward(ctx, c, c.Controller, "ControllerExpandVolume", out, c.Controller.Controller.ControllerExpandVolume)
}

// ControllerModifyVolume forwards mutable_parameters by volume ID.
func (d *Driver) ControllerModifyVolume(ctx context.Context, req *csi.ControllerModifyVolumeRequest) (*csi.ControllerModifyVolumeResponse, error) {
	t, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if len(req.GetMutableParameters()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "mutable_parameters are required")
	}
	c := t.conn
	if err := requireController(ctx, c, csi.ControllerServiceCapability_RPC_MODIFY_VOLUME, "ControllerModifyVolume"); err != nil {
		return nil, err
	}
	out := outbound(req)
	out.VolumeId = t.handle
	out.MutableParameters = mergeParameters(nil, req.GetMutableParameters())
	out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
	return forward(ctx, c, c.Controller, "ControllerModifyVolume", out, c.Controller.Controller.ControllerModifyVolume)
}
