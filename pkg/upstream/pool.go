// Package upstream holds the gRPC clients the proxy forwards to.
//
// A Pool (pool.go) shares them: one Client per external endpoint, however
// many connections name it, and one in-process built-in local-hostpath
// driver per base path, served over an in-memory listener so the proxy
// forwards to it exactly as to an external driver. The Pool logs every
// upstream call at debug and reports it to an Observer (the metrics).
//
// A Client (client.go) is the one place an upstream's capabilities are
// discovered and cached: HasController and HasNode ask the upstream once
// and answer from memory after that.
//
// WithConnection and ConnectionFrom carry the name of the connection a call
// is made for through its context, since a Client is shared by connections.
package upstream

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
)

// Pool shares clients between connections: every connection naming the same
// endpoint (or the same local-hostpath base path) uses one Client, so a
// thousand connections to one storage system cost one gRPC channel.
type Pool struct {
	log      *slog.Logger
	observer atomic.Pointer[Observer]

	mu      sync.Mutex
	clients map[string]*Client
	closed  bool
}

// NewPool returns an empty pool.
func NewPool(log *slog.Logger) *Pool {
	return &Pool{log: log, clients: map[string]*Client{}}
}

// Observer is told about every finished upstream call: target is the
// Client's Target, method the full gRPC method name.
type Observer func(ctx context.Context, target, method string, code codes.Code, d time.Duration)

// SetObserver reports every later upstream call to o; nil stops reporting.
func (p *Pool) SetObserver(o Observer) {
	if o == nil {
		p.observer.Store(nil)
		return
	}
	p.observer.Store(&o)
}

type connectionKey struct{}

// WithConnection records which connection an upstream call is made for. A
// Client is shared by every connection naming its endpoint, so only the
// caller knows; observers read it back with ConnectionFrom.
func WithConnection(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, connectionKey{}, name)
}

// ConnectionFrom returns the connection WithConnection recorded, or "".
func ConnectionFrom(ctx context.Context) string {
	name, _ := ctx.Value(connectionKey{}).(string)
	return name
}

// reconnectBackoff caps the wait between attempts to reach an upstream
// that went away at one second, as csi-lib-utils does for CSI sockets:
// gRPC's default grows to two minutes, so calls would keep failing for up
// to that long after a restarted upstream is back.
var reconnectBackoff = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: 20 * time.Second,
}

// CSI returns the shared client for an external endpoint (unix:///path or
// host:port). grpc.NewClient does not dial, so this never blocks.
func (p *Pool) CSI(endpoint string) (*Client, error) {
	return p.get("csi:"+endpoint, func() (*Client, error) {
		target := endpoint
		if !strings.HasPrefix(endpoint, "unix:") {
			// host:port, explicitly DNS: gRPC would read a host such as
			// "unix-abstract" or "passthrough" as a scheme.
			target = "dns:///" + endpoint
		}
		conn, err := grpc.NewClient(target,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithConnectParams(reconnectBackoff),
			grpc.WithChainUnaryInterceptor(p.logCall(endpoint)),
		)
		if err != nil {
			return nil, fmt.Errorf("endpoint %s: %w", endpoint, err)
		}
		return newClient(endpoint, conn), nil
	})
}

// Local returns the in-process built-in driver for opts.BasePath, serving it
// over an in-memory listener so the proxy forwards to it exactly as to an
// external driver. One base path has one driver, whose per-volume locks
// serialise every connection using it; a connection that asks for the same
// path with other stage/controllerPublish settings is refused, since one
// directory tree cannot be staged and unstaged at once.
func (p *Pool) Local(opts hostpath.Options) (*Client, error) {
	target := "local-hostpath:" + opts.BasePath
	c, err := p.get(target, func() (*Client, error) {
		d, err := hostpath.New(opts)
		if err != nil {
			return nil, err
		}
		lis := bufconn.Listen(1 << 20)
		srv := grpc.NewServer()
		d.Register(srv)
		go func() { _ = srv.Serve(lis) }()
		conn, err := grpc.NewClient("passthrough:///"+target,
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithChainUnaryInterceptor(p.logCall(target)),
		)
		if err != nil {
			srv.Stop()
			return nil, err
		}
		c := newClient(target, conn)
		c.server, c.lis, c.local = srv, lis, &opts
		return c, nil
	})
	if err != nil {
		return nil, err
	}
	if c.local != nil && (c.local.Stage != opts.Stage || c.local.ControllerPublish != opts.ControllerPublish) {
		return nil, fmt.Errorf("shareBasePath %s is already served with stage=%t controllerPublish=%t; this connection asks for stage=%t controllerPublish=%t",
			opts.BasePath, c.local.Stage, c.local.ControllerPublish, opts.Stage, opts.ControllerPublish)
	}
	return c, nil
}

func (p *Pool) get(key string, create func() (*Client, error)) (*Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("upstream pool is shut down")
	}
	if c, ok := p.clients[key]; ok {
		return c, nil
	}
	c, err := create()
	if err != nil {
		return nil, err
	}
	p.clients[key] = c
	return c, nil
}

// Len reports how many upstream clients exist.
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.clients)
}

// Close closes every client and stops in-process drivers.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for k, c := range p.clients {
		_ = c.conn.Close()
		if c.server != nil {
			c.server.Stop()
		}
		delete(p.clients, k)
	}
}

// logCall logs each upstream call at debug level and reports it to the
// observer; with neither, the call goes straight through, keeping the hot
// path free of clocks and formatting.
func (p *Pool) logCall(target string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		obs := p.observer.Load()
		debug := p.log.Enabled(ctx, slog.LevelDebug)
		if obs == nil && !debug {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		start := time.Now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		d := time.Since(start)
		if obs != nil {
			(*obs)(ctx, target, method, status.Code(err), d)
		}
		if debug {
			p.log.DebugContext(ctx, "upstream call", "upstream", target, "method", method,
				"code", status.Code(err).String(), "duration", d)
		}
		return err
	}
}
