package csi

import (
	"context"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/backend"
	"github.com/democratic-csi/proxy-topology/pkg/ids"
)

// CreateSnapshot routes by the source volume and wraps the snapshot ID,
// deleting the upstream snapshot if its ID cannot be handed back.
func (d *Driver) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	t, release, err := d.routeVolume(ctx, "source_volume_id", req.GetSourceVolumeId())
	if err != nil {
		return nil, orMissing(err, field{"name", req.GetName() == ""})
	}
	defer release()
	c := t.conn
	if err := requireController(ctx, c, csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT, "CreateSnapshot"); err != nil {
		return nil, err
	}
	out := outbound(req)
	out.SourceVolumeId = t.handle
	out.Parameters = mergeParameters(nil, req.GetParameters())
	out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
	resp, err := forwardCreate(ctx, d, c, "CreateSnapshot", req.GetName(), out, c.Controller.Controller.CreateSnapshot)
	if err != nil {
		return nil, err
	}
	snap := resp.GetSnapshot()
	if snap.GetSnapshotId() == "" {
		return nil, status.Errorf(codes.Internal, "connection %q: upstream CreateSnapshot returned no snapshot id; nothing to hand back or clean up", c.Name)
	}
	upstreamID := snap.GetSnapshotId()
	undo := func(ctx context.Context) error {
		_, err := forward(ctx, c, c.Controller, "DeleteSnapshot",
			&csi.DeleteSnapshotRequest{SnapshotId: upstreamID, Secrets: out.Secrets}, c.Controller.Controller.DeleteSnapshot)
		return err
	}
	id, err := d.encodeID(ctx, ids.Snapshot, c, upstreamID)
	if err != nil {
		return nil, d.rollback(ctx, c, codes.InvalidArgument, err, undo)
	}
	snap.SnapshotId = id
	snap.SourceVolumeId = req.GetSourceVolumeId()
	if err := replyTooLarge(resp); err != nil {
		return nil, d.rollback(ctx, c, codes.Internal, err, undo)
	}
	return resp, nil
}

// DeleteSnapshot routes by ID; an ID the proxy never made is already gone.
func (d *Driver) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	t, release, err := d.routeRemoval(ctx, ids.Snapshot, "snapshot_id", req.GetSnapshotId())
	if err != nil {
		return nil, err
	}
	defer release()
	if t == nil {
		return &csi.DeleteSnapshotResponse{}, nil
	}
	c := t.conn
	if err := requireController(ctx, c, csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT, "DeleteSnapshot"); err != nil {
		return nil, err
	}
	out := outbound(req)
	out.SnapshotId = t.handle
	out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
	return forward(ctx, c, c.Controller, "DeleteSnapshot", out, c.Controller.Controller.DeleteSnapshot)
}

// GetSnapshot routes by snapshot ID.
func (d *Driver) GetSnapshot(ctx context.Context, req *csi.GetSnapshotRequest) (*csi.GetSnapshotResponse, error) {
	t, release, err := d.routeSnapshot(ctx, "snapshot_id", req.GetSnapshotId())
	if err != nil {
		return nil, err
	}
	defer release()
	c := t.conn
	if err := requireController(ctx, c, csi.ControllerServiceCapability_RPC_GET_SNAPSHOT, "GetSnapshot"); err != nil {
		return nil, err
	}
	out := outbound(req)
	out.SnapshotId = t.handle
	out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
	resp, err := forward(ctx, c, c.Controller, "GetSnapshot", out, c.Controller.Controller.GetSnapshot)
	if err != nil {
		return nil, err
	}
	if s := resp.GetSnapshot(); s != nil && !d.wrapSnapshot(ctx, c, s) {
		// Never hand the CO an upstream ID it would take for a proxy one.
		return nil, status.Errorf(codes.Internal, "connection %q: upstream GetSnapshot answered a snapshot whose id cannot be made a proxy id", c.Name)
	}
	return resp, nil
}

// wrapSnapshot rewrites a snapshot's IDs to proxy IDs; false means the
// snapshot cannot be represented and is left out (logged).
func (d *Driver) wrapSnapshot(ctx context.Context, c *backend.Conn, s *csi.Snapshot) bool {
	if s == nil {
		return false
	}
	id, err := d.encodeID(ctx, ids.Snapshot, c, s.GetSnapshotId())
	if err != nil {
		d.log.WarnContext(ctx, "upstream snapshot cannot get a proxy id; left out", "connection", c.Name, "error", err)
		return false
	}
	s.SnapshotId = id
	if s.GetSourceVolumeId() != "" {
		s.SourceVolumeId = ids.ID{Kind: ids.Volume, Connection: c.Name, Handle: s.GetSourceVolumeId()}.String()
	}
	return true
}
