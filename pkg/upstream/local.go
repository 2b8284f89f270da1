package upstream

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
)

// The built-in driver is called in process, without gRPC: a call on a
// local Client runs the Pool's client interceptor (the accounting that lets
// a released client drain, the debug log line and the metrics, exactly as
// for an external upstream) around a direct call of the driver's method:
// no encoding, decoding or goroutine hand-off on the way.
//
// What gRPC did on the way is kept where it matters:
//   - the call returns when the caller's context ends, with the status gRPC
//     would give (DEADLINE_EXCEEDED, CANCELED), even if the driver is stuck
//     on a hung mount; the handler then ends on its own, as a gRPC
//     handler whose client went away does;
//   - errors are gRPC statuses: an error that is not one becomes UNKNOWN.
//
// Requests and responses are shared, not copied: the driver keeps no
// reference to a request and builds every response afresh, so the proxy
// may rewrite a response it got.

type localIdentity struct {
	c *Client
	d *hostpath.Driver
}

type localController localIdentity

type localNode localIdentity

// attachLocal makes the driver d the client's upstream.
func (c *Client) attachLocal(d *hostpath.Driver, intercept grpc.UnaryClientInterceptor) {
	c.intercept = intercept
	c.Identity = localIdentity{c, d}
	c.Controller = localController{c, d}
	c.Node = localNode{c, d}
}

// invokeLocal runs handler for method through the client's interceptor.
func invokeLocal[Req, Resp any](c *Client, ctx context.Context, method string, in Req, handler func(context.Context, Req) (Resp, error)) (Resp, error) {
	var out Resp
	err := c.intercept(ctx, method, in, nil, nil, func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		if err := ctx.Err(); err != nil {
			return status.FromContextError(err).Err()
		}
		type result struct {
			resp Resp
			err  error
		}
		done := make(chan result, 1)
		go func() {
			resp, err := handler(ctx, in)
			done <- result{resp, err}
		}()
		select {
		case r := <-done:
			out = r.resp
			return asStatus(r.err)
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	})
	if err != nil {
		var zero Resp
		return zero, err
	}
	return out, nil
}

// asStatus is what a gRPC client would see of a handler's error.
func asStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return status.FromContextError(err).Err()
	}
	return status.Convert(err).Err()
}
