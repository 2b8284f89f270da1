package csi

import (
	"context"
	"fmt"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/backend"
	"github.com/democratic-csi/proxy-topology/pkg/clip"
	"github.com/democratic-csi/proxy-topology/pkg/ids"
	"github.com/democratic-csi/proxy-topology/pkg/logging"
	"github.com/democratic-csi/proxy-topology/pkg/upstream"
)

// CreateVolume resolves the connection, checks topology, forwards, and wraps
// the result. A volume the proxy cannot hand back (ID too long) is deleted
// upstream before the error is returned, so nothing leaks.
//
// Like every forwarded call it checks only what the proxy itself needs:
// the connection parameter (to route), the accessibility requirements
// (its own topology decision) and a content source's ID (to unwrap it).
// name and volume_capabilities are REQUIRED, but the proxy uses neither
// (a group's choice of member depends on the terms only), so the upstream
// judges them as it would without the proxy (docs/conformance.md).
func (d *Driver) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	c, release, err := d.createConnection(ctx, req)
	if err != nil {
		return nil, err
	}
	defer release()
	decision, out, err := d.prepareCreate(ctx, c, req)
	if err != nil {
		return nil, err
	}
	resp, err := forwardCreate(ctx, d, c, "CreateVolume", req.GetName(), out, c.Controller.Controller.CreateVolume)
	if err != nil {
		return nil, err
	}
	return d.finishCreate(ctx, c, req, decision, out, resp)
}

// createConnection routes a CreateVolume: the connection its parameters
// name, or for a group the member chosen to serve it (the group itself is
// released once the member is chosen), with the release function of what
// it returns.
func (d *Driver) createConnection(ctx context.Context, req *csi.CreateVolumeRequest) (*backend.Conn, func(), error) {
	c, release, err := d.connectionFromParameters(ctx, req.GetParameters())
	if err != nil || !c.IsGroup() {
		return c, release, err
	}
	defer release()
	return d.groupMember(ctx, c, req)
}

// prepareCreate decides the request's topology on c and builds the
// upstream's request.
func (d *Driver) prepareCreate(ctx context.Context, c *backend.Conn, req *csi.CreateVolumeRequest) (accessible.Decision, *csi.CreateVolumeRequest, error) {
	decision, err := d.decide(c.Connection, req.GetAccessibilityRequirements())
	if err != nil {
		return accessible.Decision{}, nil, err
	}
	out := outbound(req)
	out.Parameters = mergeParameters(c.Config.CSI.Parameters, req.GetParameters())
	out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
	// The upstream gets the requirements in its own keys where the
	// connection maps them (SPEC §13), else none: the proxy's keys mean
	// nothing to it.
	out.AccessibilityRequirements = c.Topology(d.opts.Topology).Upstream().Requirement(req.GetAccessibilityRequirements())
	if src := req.GetVolumeContentSource(); src != nil {
		if out.VolumeContentSource, err = unwrapSource(c, src); err != nil {
			return accessible.Decision{}, nil, err
		}
	}
	if err := requireController(ctx, c, csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, "CreateVolume"); err != nil {
		return accessible.Decision{}, nil, err
	}
	return decision, out, nil
}

// finishCreate checks the upstream's volume and makes it the proxy's: its
// ID wrapped, its topology the decision's. A volume it cannot hand back is
// deleted upstream.
func (d *Driver) finishCreate(ctx context.Context, c *backend.Conn, req *csi.CreateVolumeRequest, decision accessible.Decision, out *csi.CreateVolumeRequest, resp *csi.CreateVolumeResponse) (*csi.CreateVolumeResponse, error) {
	vol := resp.GetVolume()
	if vol.GetVolumeId() == "" {
		return nil, status.Errorf(codes.Internal, "connection %q: upstream CreateVolume returned no volume id; nothing to hand back or clean up", c.Name)
	}
	upstreamID := vol.GetVolumeId()
	decision, err := d.placement().Created(c.Connection, decision, vol.GetAccessibleTopology(), req.GetAccessibilityRequirements().GetRequisite())
	if err != nil {
		return nil, d.deleteCreated(ctx, c, vol.GetVolumeId(), out.Secrets, accessible.AnswerCode, err)
	}
	id, err := d.encodeID(ctx, ids.Volume, c, vol.GetVolumeId())
	if err != nil {
		return nil, d.deleteCreated(ctx, c, vol.GetVolumeId(), out.Secrets, codes.InvalidArgument, err)
	}
	vol.VolumeId = id
	vol.AccessibleTopology = decision.Topologies()
	if src := req.GetVolumeContentSource(); src != nil {
		vol.ContentSource = src
	}
	if err := replyTooLarge(resp); err != nil {
		return nil, d.deleteCreated(ctx, c, upstreamID, out.Secrets, codes.Internal, err)
	}
	return resp, nil
}

// MaxReplyToCO is the largest reply the proxy hands a CO: gRPC's default
// receive limit, which the CO's clients keep (csi-lib-utils, kubelet). A
// created object whose reply is larger would be lost on the CO's side,
// where nothing can delete it, so the proxy deletes it and fails the call
// (SPEC §10).
const MaxReplyToCO = 4 << 20

// replyTooLarge refuses a create's reply the CO could not receive.
func replyTooLarge(resp proto.Message) error {
	if n := proto.Size(resp); n > MaxReplyToCO {
		return fmt.Errorf("the reply would be %d bytes, more than the %d MiB a CO receives (volume_context, accessible_topology or the ID is too large)", n, MaxReplyToCO>>20)
	}
	return nil
}

// lostReply is a create whose reply the proxy could not receive
// (upstream.ReplyLost): the upstream may have made the object, and the
// proxy cannot know its ID to delete it. It is logged with the request
// name and the connection, counted (Options.OnLostReply), and answered
// INTERNAL: never RESOURCE_EXHAUSTED, which makes the external-provisioner
// send the claim elsewhere, leaving more behind. Nothing is retried: the
// same request would get the same reply. A CO retry with the same name
// reaches the same object (CSI idempotency) and fails the same way until
// the upstream's reply fits.
func (d *Driver) lostReply(ctx context.Context, c *backend.Conn, method, name string, err error) error {
	msg := status.Convert(err).Message()
	d.log.ErrorContext(ctx, "the upstream's reply to a create could not be received; the object may exist upstream and must be removed by hand if the CO does not retry",
		"connection", c.Name, "method", method, "name", logging.Caller(name), "endpoint", c.Controller.Target, "error", msg)
	if d.opts.OnLostReply != nil {
		d.opts.OnLostReply(c.Name, method)
	}
	return status.Errorf(codes.Internal, "connection %q (endpoint %s): %s %s: the upstream's reply could not be received (%s; the proxy receives replies of up to %d MiB): the object may exist upstream under that name, and the proxy, which does not know its ID, deleted nothing",
		c.Name, c.Controller.Target, method, clip.Quote(name), msg, upstream.MaxReplySize>>20)
}

// deleteCreated rolls back an upstream volume the proxy cannot hand back;
// code is the status when the clean-up worked.
func (d *Driver) deleteCreated(ctx context.Context, c *backend.Conn, volumeID string, secrets map[string]string, code codes.Code, cause error) error {
	return d.rollback(ctx, c, code, cause, func(ctx context.Context) error {
		_, err := forward(ctx, c, c.Controller, "DeleteVolume",
			&csi.DeleteVolumeRequest{VolumeId: volumeID, Secrets: secrets}, c.Controller.Controller.DeleteVolume)
		return err
	})
}

// rollback deletes an object the proxy created but cannot return, and says
// in the error whether that clean-up worked: code (the reason the object
// was refused) when it did, INTERNAL when it did not.
func (d *Driver) rollback(ctx context.Context, c *backend.Conn, code codes.Code, cause error, undo func(context.Context) error) error {
	// The caller's deadline may be what made us give up; the clean-up gets
	// its own.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.opts.RollbackTimeout)
	defer cancel()
	if err := undo(rctx); err != nil {
		d.log.ErrorContext(ctx, "could not delete upstream object after a failed create; it must be removed by hand",
			"connection", c.Name, "error", err)
		return status.Errorf(codes.Internal, "connection %q: %v; deleting the upstream object also failed: %v", c.Name, cause, err)
	}
	return status.Errorf(code, "connection %q: %v; the upstream object was deleted", c.Name, cause)
}

// unwrapSource turns a clone/restore source's proxy ID into the upstream's,
// refusing sources from another connection.
func unwrapSource(c *backend.Conn, src *csi.VolumeContentSource) (*csi.VolumeContentSource, error) {
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
func wrapSource(c *backend.Conn, src *csi.VolumeContentSource) *csi.VolumeContentSource {
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
