package csi

import (
	"context"
	"fmt"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/backend"
	"github.com/democratic-csi/proxy-topology/pkg/upstream"
)

// forward calls fn on the upstream with the connection's timeout and maps
// its error. It is the one place every routed call goes through.
func forward[Req, Resp any](ctx context.Context, c *backend.Conn, up *upstream.Client, method string, req Req,
	fn func(context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, error) {
	resp, err := callUpstream(ctx, c, req, fn)
	if err != nil {
		var zero Resp
		return zero, upstreamError(c, up, method, err)
	}
	return resp, nil
}

// callUpstream is the upstream call of forward, its error as gRPC gave it.
func callUpstream[Req, Resp any](ctx context.Context, c *backend.Conn, req Req, fn func(context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, error) {
	ctx, cancel := upstreamContext(ctx, c)
	defer cancel()
	return fn(ctx, req)
}

// forwardCreate is forward for a call that makes an object upstream
// (CreateVolume, CreateSnapshot, named name): a reply the proxy could not
// receive may name an object that now exists, so it is reported as
// possibly left (lostReply) rather than as the upstream's error.
func forwardCreate[Req, Resp any](ctx context.Context, d *Driver, c *backend.Conn, method, name string, req Req,
	fn func(context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, error) {
	resp, err := callUpstream(ctx, c, req, fn)
	if err != nil {
		var zero Resp
		if upstream.ReplyLost(err) {
			return zero, d.lostReply(ctx, c, method, name, err)
		}
		return zero, upstreamError(c, c.Controller, method, err)
	}
	return resp, nil
}

// upstreamContext tags ctx with the connection and caps it with the
// connection's csi.timeout. Every upstream call goes through it, capability
// discovery included: an upstream that hangs on ControllerGetCapabilities
// is as hung as one that hangs on the call itself.
func upstreamContext(ctx context.Context, c *backend.Conn) (context.Context, context.CancelFunc) {
	ctx = upstream.WithConnection(ctx, c.Name)
	if t := c.Config.CSI.Timeout; t > 0 {
		return context.WithTimeout(ctx, t)
	}
	return ctx, func() {}
}

// upstreamError keeps the upstream's code and details and adds which
// connection (and, for transport failures, which endpoint) answered. An
// upstream UNIMPLEMENTED becomes INVALID_ARGUMENT: this driver advertises
// the RPC, and UNIMPLEMENTED would tell the CO that no storage class
// supports it.
func upstreamError(c *backend.Conn, up *upstream.Client, method string, err error) error {
	st := status.Convert(err)
	var msg string
	switch {
	case st.Code() == codes.Unimplemented:
		return unsupported(c, method)
	case upstream.SizeFailure(err):
		// gRPC's code for a message too big is RESOURCE_EXHAUSTED, which a
		// CO reads as "no room here" (SPEC §10).
		return status.Errorf(codes.Internal, "connection %q (endpoint %s): %s: %s (the proxy receives upstream replies of up to %d MiB)",
			c.Name, up.Target, method, st.Message(), upstream.MaxReplySize>>20)
	case st.Code() == codes.Unavailable, st.Code() == codes.DeadlineExceeded, st.Code() == codes.Canceled:
		msg = fmt.Sprintf("connection %q (endpoint %s): %s", c.Name, up.Target, st.Message())
	default:
		msg = fmt.Sprintf("connection %q: %s", c.Name, st.Message())
	}
	p := st.Proto()
	p.Message = msg
	return status.FromProto(p).Err()
}

func unsupported(c *backend.Conn, method string) error {
	return status.Errorf(codes.InvalidArgument, "connection %q (driver %s) does not support %s", c.Name, c.Config.Driver, method)
}

// controllerHas reports whether the connection's controller upstream
// advertises a controller capability. The upstream client discovers its
// capabilities once and caches them (pkg/upstream). A group has no
// upstream and so no capability: listings skip it (group.go).
func controllerHas(ctx context.Context, c *backend.Conn, cap csi.ControllerServiceCapability_RPC_Type) (bool, error) {
	if c.IsGroup() {
		return false, nil
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
func requireController(ctx context.Context, c *backend.Conn, cap csi.ControllerServiceCapability_RPC_Type, method string) error {
	ok, err := controllerHas(ctx, c, cap)
	if err != nil {
		return err
	}
	if !ok {
		return unsupported(c, method)
	}
	return nil
}

// nodeHas is controllerHas for the node upstream's node capabilities.
func nodeHas(ctx context.Context, c *backend.Conn, cap csi.NodeServiceCapability_RPC_Type) (bool, error) {
	if c.IsGroup() {
		return false, nil
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
func requireNode(ctx context.Context, c *backend.Conn, cap csi.NodeServiceCapability_RPC_Type, method string) error {
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
