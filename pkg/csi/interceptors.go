package csi

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/logging"
	"github.com/democratic-csi/proxy-topology/pkg/upstream"
)

type callKey struct{}

// call carries per-request facts that handlers learn (the connection) to
// the logging interceptor, which runs outside them.
type call struct {
	// id is the request number; RequestID formats it only when a log line
	// or an error message needs it.
	id         uint64
	connection atomic.Pointer[string]
}

// setConnection records the connection a request was routed to.
func setConnection(ctx context.Context, name string) {
	if c, ok := ctx.Value(callKey{}).(*call); ok {
		c.connection.Store(&name)
	}
}

// RequestID returns the id the interceptor assigned to this request.
func RequestID(ctx context.Context) string {
	if c, ok := ctx.Value(callKey{}).(*call); ok {
		return strconv.FormatUint(c.id, 10)
	}
	return ""
}

// ConnectionFromContext returns the connection a call works for: the one an
// upstream call was made for (upstream.WithConnection), else the one the
// request was routed to, else "" (a listing over all connections, or a call
// that names none).
func ConnectionFromContext(ctx context.Context) string {
	if name := upstream.ConnectionFrom(ctx); name != "" {
		return name
	}
	if c, ok := ctx.Value(callKey{}).(*call); ok {
		if name := c.connection.Load(); name != nil {
			return *name
		}
	}
	return ""
}

var requestCounter atomic.Uint64

// Observer is told about every finished RPC, with the method's short name
// and the connection it was routed to ("" if none); metrics implement it.
type Observer interface {
	ObserveRPC(method, connection string, code codes.Code, d time.Duration)
}

// interceptors returns the server interceptor: a request id, logging (which
// also reports to the observers) and panic recovery, so a recovered panic
// is logged like any other failed call. The work before and after the
// handler is in rpcStart, rpcEnd and rpcPanic.
func interceptors(log *slog.Logger, observers ...Observer) grpc.ServerOption {
	return grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		ctx, method, debug := rpcStart(ctx, log, info, req)
		start := time.Now()
		defer func() {
			if r := recover(); r != nil {
				resp, err = rpcPanic(ctx, log, info, r)
			}
			rpcEnd(ctx, log, observers, method, debug, time.Since(start), resp, err)
		}()
		return handler(ctx, req)
	})
}

// polled are the methods the CO and its sidecars call on a timer rather
// than because someone asked for a volume. A successful one is logged at
// debug, or the log would be mostly these; a failed one is logged like any
// other call, since it is news.
//
//   - Probe: livenessprobe on every kubelet liveness probe of the pod.
//   - NodeGetCapabilities, NodeGetVolumeStats: kubelet, for every mounted
//     volume on every volume-stats period (a minute by default).
//   - GetCapacity: external-provisioner's capacity tracking, for every
//     storage class and topology segment on every poll interval.
//   - ControllerGetCapabilities: every controller sidecar, at start and
//     before its periodic work.
//
// GetPluginInfo, GetPluginCapabilities and NodeGetInfo are called once per
// sidecar start (node-driver-registrar, livenessprobe, the controller
// sidecars) and stay at info: they show who connected.
var polled = map[string]bool{
	"Probe":                     true,
	"NodeGetCapabilities":       true,
	"NodeGetVolumeStats":        true,
	"GetCapacity":               true,
	"ControllerGetCapabilities": true,
}

// logLevel is the level of the line logged for a finished call.
func logLevel(method string, err error) slog.Level {
	switch {
	case status.Code(err) == codes.Internal:
		return slog.LevelError
	case err == nil && polled[method]:
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// rpcStart numbers the call, puts it in ctx, and returns the method's
// short name and whether debug logging is on, logging the request if it
// is.
func rpcStart(ctx context.Context, log *slog.Logger, info *grpc.UnaryServerInfo, req any) (context.Context, string, bool) {
	cl := &call{id: requestCounter.Add(1)}
	ctx = context.WithValue(ctx, callKey{}, cl)
	method := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
	debug := log.Enabled(ctx, slog.LevelDebug)
	if debug {
		log.DebugContext(ctx, "request", "method", method, "request_id", RequestID(ctx), "request", logging.Sanitized{Msg: req})
	}
	return ctx, method, debug
}

// rpcEnd reports a finished call to the observers and logs it.
func rpcEnd(ctx context.Context, log *slog.Logger, observers []Observer, method string, debug bool, elapsed time.Duration, resp any, err error) {
	var conn *string
	if c, ok := ctx.Value(callKey{}).(*call); ok {
		conn = c.connection.Load()
	}
	if len(observers) > 0 {
		name := ""
		if conn != nil {
			name = *conn
		}
		for _, o := range observers {
			o.ObserveRPC(method, name, status.Code(err), elapsed)
		}
	}
	level := logLevel(method, err)
	if !log.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("method", method),
		slog.String("request_id", RequestID(ctx)),
		slog.String("code", status.Code(err).String()),
		slog.Duration("duration", elapsed),
	}
	if conn != nil {
		// The name a call asked for, maybe no connection's: cut.
		attrs = append(attrs, slog.String("connection", logging.Caller(*conn)))
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", status.Convert(err).Message()))
	} else if debug {
		attrs = append(attrs, slog.Any("response", logging.Sanitized{Msg: resp}))
	}
	log.LogAttrs(ctx, level, "rpc", attrs...)
}

// rpcPanic logs a panic recovered from a handler and returns the error the
// client gets instead.
func rpcPanic(ctx context.Context, log *slog.Logger, info *grpc.UnaryServerInfo, r any) (any, error) {
	log.ErrorContext(ctx, "panic in handler", "method", info.FullMethod, "request_id", RequestID(ctx),
		"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	return nil, status.Errorf(codes.Internal, "internal error in %s (request %s); see the driver log", info.FullMethod, RequestID(ctx))
}
