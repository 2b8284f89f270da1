package csi

import (
	"context"
	"fmt"
	"math"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/connection"
	"github.com/democratic-csi/proxy-topology/pkg/ids"
)

// ControllerGetCapabilities advertises what the proxy routes.
func (d *Driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	resp := &csi.ControllerGetCapabilitiesResponse{}
	for _, t := range d.caps.Controller {
		resp.Capabilities = append(resp.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return resp, nil
}

// CreateVolume resolves the connection, checks topology, forwards, and wraps
// the result. A volume the proxy cannot hand back (ID too long) is deleted
// upstream before the error is returned, so nothing leaks.
func (d *Driver) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume_capabilities are required")
	}
	c, err := d.connectionFromParameters(ctx, req.GetParameters())
	if err != nil {
		return nil, err
	}
	requirement := req.GetAccessibilityRequirements()
	decision, err := c.Topology(d.opts.Topology).Decide(c.Name, requirement.GetRequisite(), requirement.GetPreferred())
	if err != nil {
		return nil, err
	}
	topology := decision.Topologies()
	// Never mutate the inbound request: edit a clone.
	out := shallowCopy(req)
	out.Parameters = mergeParameters(c.Config.CSI.Parameters, req.GetParameters())
	out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
	out.AccessibilityRequirements = nil
	if src := req.GetVolumeContentSource(); src != nil {
		if out.VolumeContentSource, err = unwrapSource(c, src); err != nil {
			return nil, err
		}
	}
	if err := requireController(ctx, c, csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, "CreateVolume"); err != nil {
		return nil, err
	}
	resp, err := forward(ctx, c, c.Controller, "CreateVolume", out, c.Controller.Controller.CreateVolume)
	if err != nil {
		return nil, err
	}
	if err := d.wrapCreated(ctx, c, resp.GetVolume(), topology, out.Secrets); err != nil {
		return nil, err
	}
	if src := req.GetVolumeContentSource(); src != nil {
		resp.Volume.ContentSource = src
	}
	return resp, nil
}

// wrapCreated turns the volume an upstream just created into the proxy's:
// its ID wrapped and its topology the decided one. A volume whose ID cannot
// be wrapped is deleted again (with secrets) so that nothing leaks. Both the
// typed CreateVolume and the wire-level one finish through here.
func (d *Driver) wrapCreated(ctx context.Context, c *connection.Connection, vol *csi.Volume, topology []*csi.Topology, secrets map[string]string) error {
	if vol.GetVolumeId() == "" {
		return noVolumeID(c)
	}
	id, err := ids.Encode(ids.Volume, c.Name, vol.GetVolumeId())
	if err != nil {
		return d.deleteCreated(ctx, c, vol.GetVolumeId(), secrets, err)
	}
	vol.VolumeId = id
	vol.AccessibleTopology = topology
	return nil
}

func noVolumeID(c *connection.Connection) error {
	return status.Errorf(codes.Internal, "connection %q: upstream CreateVolume returned no volume id; nothing to hand back or clean up", c.Name)
}

// deleteCreated rolls back an upstream volume the proxy cannot hand back.
func (d *Driver) deleteCreated(ctx context.Context, c *connection.Connection, volumeID string, secrets map[string]string, cause error) error {
	return d.rollback(ctx, c, cause, func(ctx context.Context) error {
		_, err := forward(ctx, c, c.Controller, "DeleteVolume",
			&csi.DeleteVolumeRequest{VolumeId: volumeID, Secrets: secrets}, c.Controller.Controller.DeleteVolume)
		return err
	})
}

// rollback deletes an object the proxy created but cannot return, and says
// in the error whether that clean-up worked.
func (d *Driver) rollback(ctx context.Context, c *connection.Connection, cause error, undo func(context.Context) error) error {
	// The caller's deadline may be what made us give up; the clean-up gets
	// its own.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.opts.RollbackTimeout)
	defer cancel()
	if err := undo(rctx); err != nil {
		d.log.ErrorContext(ctx, "could not delete upstream object after a failed create; it must be removed by hand",
			"connection", c.Name, "error", err)
		return status.Errorf(codes.Internal, "connection %q: %v; deleting the upstream object also failed: %v", c.Name, cause, err)
	}
	return status.Errorf(codes.InvalidArgument, "connection %q: %v; the upstream object was deleted", c.Name, cause)
}

// unwrapSource turns a clone/restore source's proxy ID into the upstream's,
// refusing sources from another connection.
func unwrapSource(c *connection.Connection, src *csi.VolumeContentSource) (*csi.VolumeContentSource, error) {
	switch {
	case src.GetSnapshot() != nil:
		id, err := parseID(ids.Snapshot, "volume_content_source.snapshot.snapshot_id", src.GetSnapshot().GetSnapshotId())
		if err != nil {
			return nil, err
		}
		if id.Connection != c.Name {
			return nil, status.Errorf(codes.InvalidArgument, "cannot restore snapshot of connection %q into a volume of connection %q: restore works only within one connection", id.Connection, c.Name)
		}
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: id.Handle}}}, nil
	case src.GetVolume() != nil:
		id, err := parseID(ids.Volume, "volume_content_source.volume.volume_id", src.GetVolume().GetVolumeId())
		if err != nil {
			return nil, err
		}
		if id.Connection != c.Name {
			return nil, status.Errorf(codes.InvalidArgument, "cannot clone volume of connection %q into a volume of connection %q: cloning works only within one connection", id.Connection, c.Name)
		}
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id.Handle}}}, nil
	}
	return nil, status.Error(codes.InvalidArgument, "volume_content_source has neither snapshot nor volume")
}

// wrapSource turns an upstream content source back into proxy IDs.
func wrapSource(c *connection.Connection, src *csi.VolumeContentSource) *csi.VolumeContentSource {
	switch {
	case src.GetSnapshot() != nil:
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{
			SnapshotId: ids.ID{Kind: ids.Snapshot, Connection: c.Name, Handle: src.GetSnapshot().GetSnapshotId()}.String()}}}
	case src.GetVolume() != nil:
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{
			VolumeId: ids.ID{Kind: ids.Volume, Connection: c.Name, Handle: src.GetVolume().GetVolumeId()}.String()}}}
	}
	return src
}

// routeVolume parses a volume ID and resolves its connection. ok=false with
// a nil error means the ID was not made by the proxy and the caller may
// treat the call as already done (idempotent deletes).
func (d *Driver) routeVolume(ctx context.Context, field, volumeID string, tolerant bool) (*connection.Connection, ids.ID, bool, error) {
	return d.route(ctx, ids.Volume, field, volumeID, tolerant)
}

func (d *Driver) route(ctx context.Context, kind ids.Kind, field, raw string, tolerant bool) (*connection.Connection, ids.ID, bool, error) {
	id, err := parseID(kind, field, raw)
	if err != nil {
		if tolerant && raw != "" {
			d.log.InfoContext(ctx, fmt.Sprintf("%s was not made by this driver; nothing to do", field), "id", raw)
			return nil, ids.ID{}, false, nil
		}
		return nil, ids.ID{}, false, err
	}
	c, err := d.connection(ctx, id.Connection)
	if err != nil {
		return nil, ids.ID{}, false, err
	}
	return c, id, true, nil
}

// DeleteVolume routes by ID; an ID the proxy never made is already gone.
func (d *Driver) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	c, id, ok, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId(), true)
	if !ok {
		return &csi.DeleteVolumeResponse{}, err
	}
	if err := requireController(ctx, c, csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, "DeleteVolume"); err != nil {
		return nil, err
	}
	out := shallowCopy(req)
	out.VolumeId = id.Handle
	out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
	return forward(ctx, c, c.Controller, "DeleteVolume", out, c.Controller.Controller.DeleteVolume)
}

// ValidateVolumeCapabilities routes by ID and reports the request's own
// parameters as confirmed (the upstream never saw the connection one).
func (d *Driver) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	c, id, _, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId(), false)
	if err != nil {
		return nil, err
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume_capabilities are required")
	}
	out := shallowCopy(req)
	out.VolumeId = id.Handle
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
	c, id, _, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId(), false)
	if err != nil {
		return nil, err
	}
	if err := requireController(ctx, c, csi.ControllerServiceCapability_RPC_GET_VOLUME, "ControllerGetVolume"); err != nil {
		return nil, err
	}
	out := shallowCopy(req)
	out.VolumeId = id.Handle
	resp, err := forward(ctx, c, c.Controller, "ControllerGetVolume", out, c.Controller.Controller.ControllerGetVolume)
	if err != nil {
		return nil, err
	}
	if vol := resp.GetVolume(); vol != nil {
		vol.VolumeId = req.GetVolumeId()
		vol.AccessibleTopology = c.Topology(d.opts.Topology).All().Topologies()
		if src := vol.GetContentSource(); src != nil {
			vol.ContentSource = wrapSource(c, src)
		}
	}
	return resp, nil
}

// ControllerExpandVolume routes by ID.
func (d *Driver) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	c, id, _, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId(), false)
	if err != nil {
		return nil, err
	}
	if req.GetCapacityRange() == nil {
		return nil, status.Error(codes.InvalidArgument, "capacity_range is required")
	}
	if err := requireController(ctx, c, csi.ControllerServiceCapability_RPC_EXPAND_VOLUME, "ControllerExpandVolume"); err != nil {
		return nil, err
	}
	out := shallowCopy(req)
	out.VolumeId = id.Handle
	out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
	return forward(ctx, c, c.Controller, "ControllerExpandVolume", out, c.Controller.Controller.ControllerExpandVolume)
}

// CreateSnapshot routes by the source volume and wraps the snapshot ID,
// deleting the upstream snapshot if its ID cannot be handed back.
func (d *Driver) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	c, src, _, err := d.routeVolume(ctx, "source_volume_id", req.GetSourceVolumeId(), false)
	if err != nil {
		return nil, err
	}
	if err := requireController(ctx, c, csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT, "CreateSnapshot"); err != nil {
		return nil, err
	}
	out := shallowCopy(req)
	out.SourceVolumeId = src.Handle
	out.Parameters = mergeParameters(nil, req.GetParameters())
	out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
	resp, err := forward(ctx, c, c.Controller, "CreateSnapshot", out, c.Controller.Controller.CreateSnapshot)
	if err != nil {
		return nil, err
	}
	snap := resp.GetSnapshot()
	if snap.GetSnapshotId() == "" {
		return nil, status.Errorf(codes.Internal, "connection %q: upstream CreateSnapshot returned no snapshot id; nothing to hand back or clean up", c.Name)
	}
	id, err := ids.Encode(ids.Snapshot, c.Name, snap.GetSnapshotId())
	if err != nil {
		return nil, d.rollback(ctx, c, err, func(ctx context.Context) error {
			_, err := forward(ctx, c, c.Controller, "DeleteSnapshot",
				&csi.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshotId(), Secrets: out.Secrets}, c.Controller.Controller.DeleteSnapshot)
			return err
		})
	}
	snap.SnapshotId = id
	snap.SourceVolumeId = req.GetSourceVolumeId()
	return resp, nil
}

// DeleteSnapshot routes by ID; an ID the proxy never made is already gone.
func (d *Driver) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	c, id, ok, err := d.route(ctx, ids.Snapshot, "snapshot_id", req.GetSnapshotId(), true)
	if !ok {
		return &csi.DeleteSnapshotResponse{}, err
	}
	if err := requireController(ctx, c, csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT, "DeleteSnapshot"); err != nil {
		return nil, err
	}
	out := shallowCopy(req)
	out.SnapshotId = id.Handle
	out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
	return forward(ctx, c, c.Controller, "DeleteSnapshot", out, c.Controller.Controller.DeleteSnapshot)
}

// GetCapacity answers 0 for a topology the connection cannot serve, the
// maximum for an upstream that does not report capacity (seed behaviour:
// "infinite"), and the upstream's answer otherwise.
func (d *Driver) GetCapacity(ctx context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	c, err := d.connectionFromParameters(ctx, req.GetParameters())
	if err != nil {
		return nil, err
	}
	if !c.Topology(d.opts.Topology).Admits(req.GetAccessibleTopology()) {
		return &csi.GetCapacityResponse{AvailableCapacity: 0}, nil
	}
	ok, err := controllerHas(ctx, c, csi.ControllerServiceCapability_RPC_GET_CAPACITY)
	if err != nil {
		return nil, err
	}
	if !ok {
		return &csi.GetCapacityResponse{AvailableCapacity: math.MaxInt64}, nil
	}
	out := shallowCopy(req)
	out.Parameters = mergeParameters(c.Config.CSI.Parameters, req.GetParameters())
	out.AccessibleTopology = nil
	return forward(ctx, c, c.Controller, "GetCapacity", out, c.Controller.Controller.GetCapacity)
}
