// Package csi serves the CSI Identity, Controller and Node services of the
// proxy and routes every call to the connection it belongs to.
package csi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
	"github.com/democratic-csi/proxy-topology/pkg/ids"
	"github.com/democratic-csi/proxy-topology/pkg/upstream"
)

// Modes select which services a process serves.
const (
	ModeAll        = "all"
	ModeController = "controller"
	ModeNode       = "node"
)

// ConnectionParameter is the StorageClass parameter naming the connection.
const ConnectionParameter = "connection"

// Options configures the proxy driver. Zero values are noted per field.
type Options struct {
	// Name and Version are reported by GetPluginInfo.
	Name, Version string
	// NodeID is reported by NodeGetInfo.
	NodeID string
	// Mode is all, controller or node; empty means all.
	Mode string
	// Store resolves connections. Required.
	Store *connection.Store
	// DefaultConnection serves requests without a connection parameter;
	// empty refuses them.
	DefaultConnection string
	// Topology holds the prefix and node topology type used for matching.
	Topology accessible.Options
	// NodeSegments are reported by NodeGetInfo; NodeTopologyErr, when set,
	// makes NodeGetInfo fail instead (a node with no segment).
	NodeSegments    map[string]string
	NodeTopologyErr error
	// MaxVolumesPerNode is reported by NodeGetInfo; 0 means no limit.
	MaxVolumesPerNode int64
	// RollbackTimeout bounds the clean-up call after a failed create;
	// 0 means 30s.
	RollbackTimeout time.Duration
	// Capabilities are advertised; zero means everything supported
	// except controller publishing (see ResolveCapabilities).
	Capabilities Capabilities
	// Log receives driver messages; nil means slog.Default().
	Log *slog.Logger
}

// Driver implements the proxy's CSI services.
type Driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	opts  Options
	caps  Capabilities
	log   *slog.Logger
	ready atomic.Bool
}

// New returns a driver; it reports ready to Probe once SetReady is called.
func New(opts Options) (*Driver, error) {
	if opts.Store == nil {
		return nil, errors.New("csi.Options.Store is required")
	}
	if opts.Mode == "" {
		opts.Mode = ModeAll
	}
	switch opts.Mode {
	case ModeAll, ModeController, ModeNode:
	default:
		return nil, fmt.Errorf("--mode %q: want all, controller or node", opts.Mode)
	}
	if opts.RollbackTimeout == 0 {
		opts.RollbackTimeout = 30 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	caps := opts.Capabilities
	if caps.Controller == nil && caps.Node == nil {
		caps, _ = ResolveCapabilities(nil, nil, false)
	}
	return &Driver{opts: opts, caps: caps, log: opts.Log}, nil
}

// SetReady makes Probe report ready.
func (d *Driver) SetReady(ready bool) { d.ready.Store(ready) }

// Register adds the services of the driver's mode to s.
func (d *Driver) Register(s *grpc.Server) {
	csi.RegisterIdentityServer(s, d)
	if d.opts.Mode != ModeNode {
		csi.RegisterControllerServer(s, d)
	}
	if d.opts.Mode != ModeController {
		csi.RegisterNodeServer(s, d)
	}
}

// connection resolves a connection by name for a request, recording it for
// the log line.
func (d *Driver) connection(ctx context.Context, name string) (*connection.Connection, error) {
	setConnection(ctx, name)
	c, err := d.opts.Store.Get(name)
	if err != nil {
		return nil, storeError(err)
	}
	return c, nil
}

// connectionFromParameters picks the connection named by the request's
// parameters, else the default connection.
func (d *Driver) connectionFromParameters(ctx context.Context, params map[string]string) (*connection.Connection, error) {
	return d.connectionNamed(ctx, params[ConnectionParameter])
}

// connectionNamed is connectionFromParameters for the connection
// parameter's value.
func (d *Driver) connectionNamed(ctx context.Context, name string) (*connection.Connection, error) {
	if name == "" {
		name = d.opts.DefaultConnection
	}
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "parameters.connection is required: set it in the StorageClass, or set proxy.defaultConnection")
	}
	return d.connection(ctx, name)
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

// storeError maps connection lookup failures to status codes.
func storeError(err error) error {
	switch {
	case errors.Is(err, connection.ErrInvalidName):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, connection.ErrNotFound), errors.Is(err, connection.ErrBroken):
		// The admin must add or fix the file; the call can then succeed,
		// which is what FAILED_PRECONDITION tells the CO.
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// upstreamError keeps the upstream's code and details and adds which
// connection (and, for transport failures, which endpoint) answered. An
// upstream UNIMPLEMENTED becomes INVALID_ARGUMENT: this driver advertises
// the RPC, and UNIMPLEMENTED would tell the CO that no storage class
// supports it.
func upstreamError(c *connection.Connection, up *upstream.Client, method string, err error) error {
	st := status.Convert(err)
	var msg string
	code := st.Code()
	switch code {
	case codes.Unimplemented:
		return unsupported(c, method)
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		msg = fmt.Sprintf("connection %q (endpoint %s): %s", c.Name, up.Target, st.Message())
	default:
		msg = fmt.Sprintf("connection %q: %s", c.Name, st.Message())
	}
	p := st.Proto()
	p.Message = msg
	return status.FromProto(p).Err()
}

func unsupported(c *connection.Connection, method string) error {
	return status.Errorf(codes.InvalidArgument, "connection %q (driver %s) does not support %s", c.Name, c.Config.Driver, method)
}

// forward calls fn on the upstream with the connection's timeout and maps
// its error. It is the one place every routed call goes through.
func forward[Req, Resp any](ctx context.Context, c *connection.Connection, up *upstream.Client, method string, req Req,
	fn func(context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, error) {
	ctx, cancel := upstreamContext(ctx, c)
	defer cancel()
	resp, err := fn(ctx, req)
	if err != nil {
		var zero Resp
		return zero, upstreamError(c, up, method, err)
	}
	return resp, nil
}

// upstreamContext tags ctx with the connection and caps it with the
// connection's csi.timeout. Every upstream call goes through it, capability
// discovery included: an upstream that hangs on ControllerGetCapabilities
// is as hung as one that hangs on the call itself.
func upstreamContext(ctx context.Context, c *connection.Connection) (context.Context, context.CancelFunc) {
	ctx = upstream.WithConnection(ctx, c.Name)
	if t := c.Config.CSI.Timeout; t > 0 {
		return context.WithTimeout(ctx, t)
	}
	return ctx, func() {}
}

// controllerHas reports whether the connection's controller upstream has a
// controller capability.
func controllerHas(ctx context.Context, c *connection.Connection, cap csi.ControllerServiceCapability_RPC_Type) (bool, error) {
	if ok, known := c.Controller.CachedController(cap); known {
		return ok, nil
	}
	ctx, cancel := upstreamContext(ctx, c)
	defer cancel()
	ok, err := c.Controller.HasController(ctx, cap)
	if err != nil {
		return false, upstreamError(c, c.Controller, "ControllerGetCapabilities", err)
	}
	return ok, nil
}

// requireController fails with INVALID_ARGUMENT when the connection's
// upstream lacks a controller capability.
func requireController(ctx context.Context, c *connection.Connection, cap csi.ControllerServiceCapability_RPC_Type, method string) error {
	ok, err := controllerHas(ctx, c, cap)
	if err != nil {
		return err
	}
	if !ok {
		return unsupported(c, method)
	}
	return nil
}

// nodeHas reports whether the connection's node upstream has a node
// capability.
func nodeHas(ctx context.Context, c *connection.Connection, cap csi.NodeServiceCapability_RPC_Type) (bool, error) {
	if ok, known := c.Node.CachedNode(cap); known {
		return ok, nil
	}
	ctx, cancel := upstreamContext(ctx, c)
	defer cancel()
	ok, err := c.Node.HasNode(ctx, cap)
	if err != nil {
		return false, upstreamError(c, c.Node, "NodeGetCapabilities", err)
	}
	return ok, nil
}

// requireNode fails with INVALID_ARGUMENT when the connection's node
// upstream lacks a node capability.
func requireNode(ctx context.Context, c *connection.Connection, cap csi.NodeServiceCapability_RPC_Type, method string) error {
	ok, err := nodeHas(ctx, c, cap)
	if err != nil {
		return err
	}
	if !ok {
		return unsupported(c, method)
	}
	return nil
}

// merge returns defaults overlaid by values (values win). It never mutates
// either map. Secrets are merged with it as they are: a secret may well be
// called "connection".
func merge(defaults, values map[string]string) map[string]string {
	if len(defaults) == 0 && len(values) == 0 {
		return nil
	}
	out := make(map[string]string, len(defaults)+len(values))
	for k, v := range defaults {
		out[k] = v
	}
	for k, v := range values {
		out[k] = v
	}
	return out
}

// mergeParameters is merge without the connection parameter, which is the
// proxy's and never reaches an upstream.
func mergeParameters(defaults, values map[string]string) map[string]string {
	out := merge(defaults, values)
	delete(out, ConnectionParameter)
	if len(out) == 0 {
		return nil
	}
	return out
}
