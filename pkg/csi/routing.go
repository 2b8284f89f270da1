package csi

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/backend"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
	"github.com/democratic-csi/proxy-topology/pkg/ids"
	"github.com/democratic-csi/proxy-topology/pkg/logging"
)

// target is where a call about an existing volume or snapshot goes: the
// connection its ID names, and the upstream's own ID inside it.
type target struct {
	conn   *backend.Conn
	handle string
}

// noRelease is the release function of what holds nothing.
func noRelease() {}

// routeVolume resolves a volume ID the CO sent in field, with the release
// function of its connection (the handler defers it). An empty ID is
// INVALID_ARGUMENT; an ID the proxy never made names no volume, so it is
// NOT_FOUND.
func (d *Driver) routeVolume(ctx context.Context, field, volumeID string) (target, func(), error) {
	return d.route(ctx, ids.Volume, field, volumeID)
}

// routeSnapshot is routeVolume for snapshot IDs.
func (d *Driver) routeSnapshot(ctx context.Context, field, snapshotID string) (target, func(), error) {
	return d.route(ctx, ids.Snapshot, field, snapshotID)
}

// routeRemoval resolves the ID of an object to delete, unstage or
// unpublish. CSI makes those calls idempotent: an ID the proxy never made
// names nothing, so there is nothing to remove and it returns a nil target
// (and a release function that does nothing). An empty ID is still
// INVALID_ARGUMENT, and an ID whose connection is missing fails
// (FAILED_PRECONDITION): a silent success there would leak the upstream
// object.
func (d *Driver) routeRemoval(ctx context.Context, kind ids.Kind, field, raw string) (*target, func(), error) {
	if raw != "" {
		if _, err := ids.Parse(kind, raw); err != nil {
			d.log.InfoContext(ctx, fmt.Sprintf("%s was not made by this driver; nothing to do", field), "id", logging.Caller(raw))
			return nil, noRelease, nil
		}
	}
	t, release, err := d.route(ctx, kind, field, raw)
	if err != nil {
		return nil, nil, err
	}
	return &t, release, nil
}

func (d *Driver) route(ctx context.Context, kind ids.Kind, field, raw string) (target, func(), error) {
	id, err := parseID(kind, field, raw)
	if err != nil {
		return target{}, nil, err
	}
	c, release, err := d.connection(ctx, id.Connection)
	if err != nil {
		return target{}, nil, err
	}
	return target{conn: c, handle: id.Handle}, release, nil
}

// parseID parses a proxy ID. A malformed ID gives NOT_FOUND: the proxy never
// made it, so no such object exists.
func parseID(kind ids.Kind, field, s string) (ids.ID, error) {
	if s == "" {
		return ids.ID{}, status.Errorf(codes.InvalidArgument, "%s is required", field)
	}
	id, err := ids.Parse(kind, s)
	if err != nil {
		return ids.ID{}, status.Errorf(codes.NotFound, "%s: %v", field, err)
	}
	return id, nil
}

// connectionName is the connection a request's parameters name
// (StorageClass parameters.connection), else the default one; "" when
// neither is set.
func (d *Driver) connectionName(params map[string]string) string {
	if name := params[ConnectionParameter]; name != "" {
		return name
	}
	return d.opts.DefaultConnection
}

// connectionFromParameters resolves the connection connectionName picks,
// with its release function.
func (d *Driver) connectionFromParameters(ctx context.Context, params map[string]string) (*backend.Conn, func(), error) {
	name := d.connectionName(params)
	if name == "" {
		return nil, nil, status.Error(codes.InvalidArgument, "parameters.connection is required: set it in the StorageClass, or set proxy.defaultConnection")
	}
	return d.connectionOrGroup(ctx, name)
}

// connection resolves a connection that an ID names, recording it for the
// log line, with its release function. A group is refused: IDs name the
// member that holds the object (SPEC §11).
func (d *Driver) connection(ctx context.Context, name string) (*backend.Conn, func(), error) {
	c, release, err := d.connectionOrGroup(ctx, name)
	if err == nil && c.IsGroup() {
		release()
		return nil, nil, notMadeByGroup(c)
	}
	return c, release, err
}

// connectionOrGroup resolves a connection by name for a request, recording
// it for the log line; it may be a group (CreateVolume, GetCapacity). The
// caller calls the release function once its use of the connection is
// done.
func (d *Driver) connectionOrGroup(ctx context.Context, name string) (*backend.Conn, func(), error) {
	setConnection(ctx, name)
	c, release, err := d.opts.Connections.Get(ctx, name)
	if err != nil {
		return nil, nil, ConnectionError(err)
	}
	return c, release, nil
}

// ConnectionError is the status of a connection that cannot be had: its
// name, its file, or its clients (the registry's errors); `check` reports
// a connection the same way.
func ConnectionError(err error) error {
	switch {
	case errors.Is(err, connection.ErrInvalidName):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, connection.ErrNotFound), errors.Is(err, connection.ErrBroken):
		// The admin must add or fix the file; the call can then succeed,
		// which is what FAILED_PRECONDITION tells the CO.
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, connection.ErrUnavailable):
		// The upstream client could not be made in time (a built-in
		// driver on a hung mount); the message names the connection and
		// its endpoint.
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return status.Error(codes.DeadlineExceeded, err.Error())
		case errors.Is(err, context.Canceled):
			return status.Error(codes.Canceled, err.Error())
		}
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// notMadeByGroup is the error for an ID that names a group: the proxy
// never makes one (a group's volumes are named by their member), so the
// file was most likely an ordinary connection once, and its volumes need
// that file back.
func notMadeByGroup(c *backend.Conn) error {
	return status.Errorf(codes.FailedPrecondition,
		"connection %q is a group (members %q): volumes and snapshots are named by the member that holds them, never by a group; if %q was an ordinary connection when the object was made, restore its file",
		c.Name, c.Members(), c.Name)
}
