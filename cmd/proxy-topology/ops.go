package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/democratic-csi/proxy-topology/pkg/connection"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
	"github.com/democratic-csi/proxy-topology/pkg/metrics"
	"github.com/democratic-csi/proxy-topology/pkg/nodetopology"
	"github.com/democratic-csi/proxy-topology/pkg/upstream"
)

// Readiness reasons reported by /readyz until the socket serves.
const (
	notReadyLoading  = "loading config"
	notReadyStarting = "starting: evaluating node topology and opening the CSI socket"
	notReadyStopping = "shutting down"
)

// ops is the process's operational surface: metrics, /healthz and /readyz
// on --metrics-address. With no address every method does nothing, so
// Serve wires it unconditionally.
type ops struct {
	m   *metrics.Metrics
	srv *metrics.Server
	log *slog.Logger
	// notReady is why /readyz fails; "" means ready.
	notReady atomic.Pointer[string]
}

// startOps starts the metrics server before anything slow happens, so a
// liveness probe succeeds while the config loads and node labels are read.
func startOps(o Options, log *slog.Logger) (*ops, error) {
	x := &ops{log: log}
	x.setNotReady(notReadyLoading)
	if o.MetricsAddress == "" {
		return x, nil
	}
	x.m = metrics.New()
	x.m.WatchReady(x.ready)
	srv, err := metrics.Listen(o.MetricsAddress, x.m.Handler(x.ready), log)
	if err != nil {
		return nil, err
	}
	x.srv = srv
	log.Info("serving metrics", "address", "http://"+srv.Addr()+"/metrics", "health", "/healthz", "readiness", "/readyz")
	return x, nil
}

func (x *ops) setNotReady(reason string) { x.notReady.Store(&reason) }

func (x *ops) ready() error {
	if r := *x.notReady.Load(); r != "" {
		return errors.New(r)
	}
	return nil
}

// addr is the bound metrics address, or "" when metrics are off.
func (x *ops) addr() string {
	if x.srv == nil {
		return ""
	}
	return x.srv.Addr()
}

func (x *ops) observers() []pcsi.Observer {
	if x.m == nil {
		return nil
	}
	return []pcsi.Observer{x.m}
}

func (x *ops) buildInfo(version, name, mode string) {
	if x.m != nil {
		x.m.SetBuildInfo(version, name, mode)
	}
}

func (x *ops) watchPool(p *upstream.Pool) {
	if x.m != nil {
		p.SetObserver(x.m.UpstreamObserver(pcsi.ConnectionFromContext))
	}
}

// storeOptions adds the load hook to opts before the store is built.
func (x *ops) storeOptions(opts connection.Options) connection.Options {
	if x.m != nil {
		opts.OnLoad = x.m.ConnectionLoaded
	}
	return opts
}

func (x *ops) watchStore(s *connection.Store) {
	if x.m != nil {
		x.m.WatchCache(s.Cached)
		x.m.WatchConnections(s.List)
	}
}

// longID counts an ID returned over the CSI limit (csi.Options.OnLongID).
func (x *ops) longID(connection, kind string) {
	if x.m != nil {
		x.m.LongID(connection, kind)
	}
}

// lostReply counts a create whose upstream reply was lost
// (csi.Options.OnLostReply).
func (x *ops) lostReply(connection, method string) {
	if x.m != nil {
		x.m.LostReply(connection, method)
	}
}

func (x *ops) nodeTopology(res nodetopology.Result) {
	if x.m != nil {
		x.m.SetNodeTopology(res)
	}
}

// stop shuts the metrics server down; scrapes get a few seconds to finish.
func (x *ops) stop() {
	if x.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := x.srv.Shutdown(ctx); err != nil && !errors.Is(err, net.ErrClosed) {
		x.log.Warn("metrics server shutdown", "error", err)
	}
}
