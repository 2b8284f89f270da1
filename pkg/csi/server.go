package csi

import (
	"log/slog"

	"google.golang.org/grpc"

	"github.com/democratic-csi/proxy-topology/pkg/upstream"
)

// Service is a set of CSI services to serve: the proxy's Driver, or a
// built-in driver served on its own endpoint.
type Service interface {
	Register(*grpc.Server)
}

// NewServer returns the gRPC server of every CSI endpoint this binary
// serves: the interceptor (request id, logging and observers, panic
// recovery) around svc's services. Production and tests build their
// servers with it, so tests exercise exactly what production serves.
//
// Messages are decoded and encoded by gRPC's own codec with the generated
// types; nothing is parsed by hand.
//
// Flow control uses static windows (upstream.FlowWindow) instead of gRPC's
// dynamic ones, as the proxy's upstream clients do: see upstream.FlowWindow.
//
// One experimental gRPC server option is set, grpc.NumStreamWorkers: calls
// run on long-lived worker goroutines instead of a new goroutine each. A
// proxied call's stack is deep (interceptors, handler, the upstream call
// with its own interceptor), and on a new goroutine it is grown and copied
// on every call; a worker keeps its grown stack until a collection finds
// it parked and shrinks it. The interceptor and CreateVolume keep their
// frames small so that a call fits the 8 KiB a worker grows back to (see
// interceptors). Measured against the
// typed forwarder in separate processes, it cut the proxy's CPU per call at
// concurrency 64 by 10-16% over three A/B runs (docs/performance.md); an
// experimental API must earn more than 10% to stay. A call arriving while
// every worker is busy gets a goroutine of its own, as without workers.
func NewServer(svc Service, log *slog.Logger, observers ...Observer) *grpc.Server {
	srv := grpc.NewServer(interceptors(log, observers...),
		grpc.StaticStreamWindowSize(upstream.FlowWindow),
		grpc.StaticConnWindowSize(upstream.FlowWindow),
		grpc.NumStreamWorkers(streamWorkers))
	svc.Register(srv)
	return srv
}

// streamWorkers is the number of worker goroutines: the concurrency the
// proxy's benchmarks drive. Idle workers cost a few KiB of stack each;
// calls beyond them get goroutines of their own.
const streamWorkers = 64
