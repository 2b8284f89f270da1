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
// Messages are decoded and encoded by gRPC's codec with the generated
// types; nothing is parsed by hand. Flow control uses static windows, as
// the proxy's upstream clients do (upstream.FlowWindow).
func NewServer(svc Service, log *slog.Logger, observers ...Observer) *grpc.Server {
	srv := grpc.NewServer(interceptors(log, observers...),
		grpc.StaticStreamWindowSize(upstream.FlowWindow),
		grpc.StaticConnWindowSize(upstream.FlowWindow))
	svc.Register(srv)
	return srv
}
