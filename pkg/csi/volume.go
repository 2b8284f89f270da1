package csi

import (
	"context"

	csi "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/democratic-csi/proxy-topology/pkg/ids"
)

// DeleteVolume routes by ID; an ID the proxy never made is already gone.
func (d *Driver) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	t, release, err := d.routeRemoval(ctx, ids.Volume, "volume_id", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	defer release()
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

// ValidateVolumeCapabilities routes by ID and confirms, of the request's
// parameters, what the upstream confirmed (see confirmedParameters).
func (d *Driver) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	t, release, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId())
	if err != nil {
		return nil, orMissing(err, field{"volume_capabilities", len(req.GetVolumeCapabilities()) == 0})
	}
	defer release()
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
		conf.Parameters = confirmedParameters(c.Name, req.GetParameters(), conf.GetParameters())
	}
	return resp, nil
}

// confirmedParameters is what the proxy confirms of the CO's parameters:
// those the upstream confirmed with the same value, and the connection
// parameter when it names the volume's own connection (the one check the
// proxy makes). The CO compares confirmed.parameters with what it sent, so
// echoing the request would claim a validation the upstream never made,
// and the connection defaults the upstream was sent besides were never the
// CO's to see.
func confirmedParameters(conn string, sent, upstream map[string]string) map[string]string {
	var out map[string]string
	for k, v := range sent {
		ok := upstream[k] == v && k != ConnectionParameter
		if k == ConnectionParameter {
			ok = v == conn
		}
		if !ok {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(sent))
		}
		out[k] = v
	}
	return out
}

// ControllerGetVolume routes by ID and decorates the volume with the
// connection's topology; upstream topology keys never reach the CO.
func (d *Driver) ControllerGetVolume(ctx context.Context, req *csi.ControllerGetVolumeRequest) (*csi.ControllerGetVolumeResponse, error) {
	t, release, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	defer release()
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
		if vol.AccessibleTopology, err = d.existingTopology(ctx, c.Connection, req.GetVolumeId(), vol.GetAccessibleTopology()); err != nil {
			return nil, err
		}
		if src := vol.GetContentSource(); src != nil {
			vol.ContentSource = wrapSource(c, src)
		}
	}
	return resp, nil
}

// ControllerExpandVolume routes by ID.
func (d *Driver) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	t, release, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId())
	if err != nil {
		return nil, orMissing(err, field{"capacity_range", req.GetCapacityRange() == nil})
	}
	defer release()
	c := t.conn
	if err := requireController(ctx, c, csi.ControllerServiceCapability_RPC_EXPAND_VOLUME, "ControllerExpandVolume"); err != nil {
		return nil, err
	}
	out := outbound(req)
	out.VolumeId = t.handle
	out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
	return forward(ctx, c, c.Controller, "ControllerExpandVolume", out, c.Controller.Controller.ControllerExpandVolume)
}

// ControllerModifyVolume forwards by volume ID, mutable_parameters as the
// CO sent them: whether an empty map is valid is the upstream's to say
// (csi-driver-host-path refuses it, aws-ebs-csi-driver accepts it), and a
// VolumeAttributesClass may hold any key, "connection" too (only
// StorageClass parameters carry the proxy's).
func (d *Driver) ControllerModifyVolume(ctx context.Context, req *csi.ControllerModifyVolumeRequest) (*csi.ControllerModifyVolumeResponse, error) {
	t, release, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	defer release()
	c := t.conn
	if err := requireController(ctx, c, csi.ControllerServiceCapability_RPC_MODIFY_VOLUME, "ControllerModifyVolume"); err != nil {
		return nil, err
	}
	out := outbound(req)
	out.VolumeId = t.handle
	out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
	return forward(ctx, c, c.Controller, "ControllerModifyVolume", out, c.Controller.Controller.ControllerModifyVolume)
}
