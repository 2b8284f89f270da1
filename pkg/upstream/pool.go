// Package upstream holds the gRPC clients the proxy forwards to.
//
// A Pool (pool.go) shares them: one Client per external endpoint, however
// many connections name it, and one in-process built-in local-hostpath
// driver per base path and settings, called in process through the same
// client interceptor as an external driver (local.go). The Pool logs every
// upstream call at debug and reports it to an Observer (the metrics).
//
// Clients follow the life of the connections that use them. A connection
// takes a Lease for each client it uses (Pool.CSI, Pool.Local) and releases
// it when the connection is replaced, removed or expires; the Pool counts
// leases per client, and when the last one goes it lets the calls in
// flight finish, then closes the channel and stops the built-in driver.
// Nothing is ever built under the Pool's lock: a client being built for one
// connection (a built-in driver whose base path sits on a hung mount, say)
// never delays a call on another; callers of the same key share one build
// and wait for it only as long as their context allows.
//
// A Client (client.go) is the one place an upstream's capabilities are
// discovered and cached: HasController and HasNode ask the upstream once
// and answer from memory until the client reconnects or is closed;
// RefreshController and RefreshNode (the proxy's capability refresh) ask
// again and update that memory.
//
// WithConnection and ConnectionFrom carry the name of the connection a call
// is made for through its context, since a Client is shared by connections.
package upstream

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/endpoint"
	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
)

// Pool shares clients between connections: every connection naming the same
// endpoint (or the same local-hostpath base path and settings) holds a
// lease on one Client, so a thousand connections to one storage system
// cost one gRPC channel, and a client no connection holds is closed.
type Pool struct {
	log      *slog.Logger
	observer atomic.Pointer[Observer]

	// mu guards entries and closed; it is never held across a build, a
	// close or any I/O.
	mu      sync.Mutex
	entries map[string]*entry
	closed  bool
	// bg counts builds and closes running in the background.
	bg sync.WaitGroup
}

// entry is one shared client, being built or built.
type entry struct {
	key string
	// ready is closed when the build has ended; c and err are set then.
	ready chan struct{}
	c     *Client
	err   error
	// refs counts leases and callers waiting for the build; owners counts
	// them by connection name (the local-hostpath settings check).
	refs   int
	owners map[string]int
	// local is the built-in driver's settings, known before it is built.
	local *hostpath.Options
	// gone is set when the entry left the map.
	gone bool
}

func (e *entry) isReady() bool {
	select {
	case <-e.ready:
		return true
	default:
		return false
	}
}

// Lease is one connection's hold on a Client. Release it once; the Client
// closes when its last lease is released and its calls in flight ended.
type Lease struct {
	p        *Pool
	e        *entry
	owner    string
	released atomic.Bool
}

// Client returns the leased client.
func (l *Lease) Client() *Client { return l.e.c }

// Release gives the lease back; later calls do nothing.
func (l *Lease) Release() {
	if l.released.CompareAndSwap(false, true) {
		l.p.release(l.e, l.owner)
	}
}

// NewPool returns an empty pool.
func NewPool(log *slog.Logger) *Pool {
	return &Pool{log: log, entries: map[string]*entry{}}
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

// FlowWindow is the HTTP/2 flow-control window, per stream and per
// connection, of the proxy's CSI server and of its clients of external
// upstreams. A fixed window turns off gRPC's bandwidth estimator, which
// answers received data with a PING and waits for its acknowledgement:
// with one call at a time, as sidecars and kubelet mostly call, that is a
// round trip per call on each side of the proxy (docs/performance.md
// gives the figure). 4 MiB is the largest message gRPC receives by
// default, and what a CO sends and receives, so no such message waits for
// a window update (a larger upstream reply, up to MaxReplySize, does), and
// no more than dynamic windows (64 KiB growing to 16 MiB) can be buffered.
const FlowWindow = 4 << 20

// Timeouts of closing a released client: drainTimeout bounds the wait for
// its calls in flight (a connection's calls hold its lease, so there are
// rarely any; a built-in driver's handler stuck on a hung mount is given up
// on after it), and closeTimeout how long Close waits for every client.
var (
	drainTimeout = 30 * time.Second
	closeTimeout = 10 * time.Second
)

// CSI leases the shared client of an external endpoint (unix:///path or
// host:port, as a connection file names it) for the connection owner.
// Clients are shared by the endpoint's canonical form, so unix:/a and
// unix:///a share one. grpc.NewClient does not dial, so this does not
// wait for the upstream.
func (p *Pool) CSI(ctx context.Context, owner, ep string) (*Lease, error) {
	parsed, err := endpoint.Parse(ep, endpoint.Upstream)
	if err != nil {
		return nil, err
	}
	return p.acquire(ctx, "csi:"+parsed.String(), owner, nil, func() (*Client, error) {
		c := newClient(ep)
		c.endpoint = parsed
		conn, err := grpc.NewClient(parsed.Target(),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithConnectParams(reconnectBackoff),
			grpc.WithStaticStreamWindowSize(FlowWindow),
			grpc.WithStaticConnWindowSize(FlowWindow),
			grpc.WithContextDialer(c.dial),
			grpc.WithChainUnaryInterceptor(p.intercept(c)),
			// Replies up to 16 MiB, not gRPC's 4 MiB: a create's reply the
			// proxy reads names an object it can delete (replies.go).
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxReplySize)),
		)
		if err != nil {
			return nil, fmt.Errorf("endpoint %s: %w", ep, err)
		}
		c.attach(conn)
		return c, nil
	})
}

// dial connects to the upstream: its socket, or the address gRPC resolved
// for its host:port. Every connection after the first may reach another
// upstream process (a restart, an upgrade), so it empties the capability
// cache.
func (c *Client) dial(ctx context.Context, addr string) (net.Conn, error) {
	network := "tcp"
	if c.endpoint.Scheme == endpoint.Unix {
		network, addr = "unix", c.endpoint.Address
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil && c.dials.Add(1) > 1 {
		c.caps.reset()
	}
	return conn, err
}

// Local leases the in-process built-in driver for opts (its base path and
// settings: stage, controllerPublish, shared, node id) for the connection
// owner. It is called in process through the same client interceptor as
// an external driver (local.go). The driver's per-volume locks serialise
// every connection using it.
//
// A connection whose file changes its settings gets a new driver, and the
// old one closes once its calls end. Connections that differ only in node
// id or in shared get drivers of their own on one tree (the driver keeps
// its records safe for several instances); but two connections may not use
// one base path with different stage or controllerPublish settings, since
// one directory tree cannot be staged and unstaged at once.
//
// Building the driver touches the base path, which may sit on a hung
// mount: the build runs on its own, and Local waits for it only until ctx
// ends (the caller's deadline, capped by the store).
func (p *Pool) Local(ctx context.Context, owner string, opts hostpath.Options) (*Lease, error) {
	base := filepath.Clean(opts.BasePath)
	target := "local-hostpath:" + base
	key := target + "?" + opts.Settings()
	return p.acquire(ctx, key, owner, &opts, func() (*Client, error) {
		d, err := hostpath.New(opts)
		if err != nil {
			return nil, err
		}
		c := newClient(target)
		c.attachLocal(d, p.intercept(c))
		c.local = &localDriver{opts: opts, driver: d}
		return c, nil
	})
}

// conflict refuses a built-in driver for base path settings that another
// connection's driver cannot share the tree with (hostpath's rule,
// Options.CanShareTree). The same connection may hold both while an edit
// of its file takes effect.
func (p *Pool) conflict(key, owner string, opts *hostpath.Options) error {
	for k, e := range p.entries {
		if k == key || e.local == nil {
			continue
		}
		err := opts.CanShareTree(e.local)
		if err == nil {
			continue
		}
		for other := range e.owners {
			if other != owner {
				return fmt.Errorf("%w for connection %q; this connection asks for stage=%t controllerPublish=%t",
					err, other, opts.Stage, opts.ControllerPublish)
			}
		}
	}
	return nil
}

// acquire leases the client under key, building it with create if no one
// has. The build runs in its own goroutine, outside the lock: callers wait
// for it only as long as ctx allows, and a build no one waits for any more
// closes what it built.
func (p *Pool) acquire(ctx context.Context, key, owner string, local *hostpath.Options, create func() (*Client, error)) (*Lease, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, status.Error(codes.Unavailable, "upstream pool is shut down")
	}
	if local != nil {
		if err := p.conflict(key, owner, local); err != nil {
			p.mu.Unlock()
			return nil, err
		}
	}
	e := p.entries[key]
	if e == nil {
		e = &entry{key: key, ready: make(chan struct{}), owners: map[string]int{}, local: local}
		p.entries[key] = e
		p.bg.Add(1)
		go p.build(e, create)
	}
	e.refs++
	e.owners[owner]++
	p.mu.Unlock()

	select {
	case <-e.ready:
	case <-ctx.Done():
		p.release(e, owner)
		return nil, fmt.Errorf("%s is not ready: %w", targetOf(key), ctx.Err())
	}
	if e.err != nil {
		p.release(e, owner)
		return nil, e.err
	}
	return &Lease{p: p, e: e, owner: owner}, nil
}

// targetOf is the Target of the client under key.
func targetOf(key string) string {
	key = strings.TrimPrefix(key, "csi:")
	if i := strings.IndexByte(key, '?'); i >= 0 && strings.HasPrefix(key, "local-hostpath:") {
		key = key[:i]
	}
	return key
}

// build runs create and publishes its result. A failed build leaves the
// map, so the next caller tries again; a client built for no one (every
// caller gave up, or the pool closed) is closed at once.
func (p *Pool) build(e *entry, create func() (*Client, error)) {
	defer p.bg.Done()
	c, err := safely(create)
	p.mu.Lock()
	e.c, e.err = c, err
	close(e.ready)
	orphan := err == nil && (e.refs == 0 || p.closed)
	if err != nil || orphan {
		p.remove(e)
	}
	p.mu.Unlock()
	if orphan {
		p.closeClient(c)
	}
}

// safely runs create, turning a panic into an error: no panic of a build
// may take the proxy down.
func safely(create func() (*Client, error)) (c *Client, err error) {
	defer func() {
		if r := recover(); r != nil {
			c, err = nil, fmt.Errorf("building the upstream client panicked: %v", r)
		}
	}()
	return create()
}

// remove takes e out of the map; p.mu is held.
func (p *Pool) remove(e *entry) {
	e.gone = true
	if p.entries[e.key] == e {
		delete(p.entries, e.key)
	}
}

// release drops one reference to e; the last one of a built entry closes
// its client in the background.
func (p *Pool) release(e *entry, owner string) {
	p.mu.Lock()
	e.refs--
	if e.owners[owner]--; e.owners[owner] <= 0 {
		delete(e.owners, owner)
	}
	var c *Client
	if e.refs == 0 && !e.gone && e.isReady() && e.err == nil {
		p.remove(e)
		c = e.c
		p.bg.Add(1)
	}
	p.mu.Unlock()
	if c != nil {
		go func() {
			defer p.bg.Done()
			p.closeClient(c)
		}()
	}
}

// closeClient waits for c's calls in flight, closes its channel and stops
// its built-in driver.
func (p *Pool) closeClient(c *Client) {
	if !c.drain(drainTimeout) {
		p.log.Warn("closing an upstream client with calls still in flight", "upstream", c.Target, "calls", c.inflight.Load())
	}
	if c.conn != nil {
		_ = c.conn.Close()
	}
	if l := c.local; l != nil {
		// The calls in flight have drained (or were given up on after
		// drainTimeout: a handler stuck on a hung mount ends when the
		// mount answers, as it did behind a stopped gRPC server).
		if err := l.driver.Close(); err != nil {
			p.log.Warn("closing built-in driver", "upstream", c.Target, "error", err)
		}
	}
	c.closed.Store(true)
	p.log.Debug("upstream client closed", "upstream", c.Target)
}

// Len reports how many upstream clients exist, built or being built.
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.entries)
}

// Targets lists the Target of every client, for messages and tests.
func (p *Pool) Targets() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.entries))
	for k := range p.entries {
		out = append(out, targetOf(k))
	}
	return out
}

// Close closes every client and stops in-process drivers, waiting up to
// closeTimeout for them; leases released after it do nothing. A build
// still running (a hung mount) closes what it built when it ends.
func (p *Pool) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	var closing []*Client
	for _, e := range p.entries {
		if e.isReady() && e.err == nil {
			p.remove(e)
			closing = append(closing, e.c)
		}
	}
	p.bg.Add(len(closing))
	p.mu.Unlock()
	for _, c := range closing {
		go func() {
			defer p.bg.Done()
			p.closeClient(c)
		}()
	}
	done := make(chan struct{})
	go func() {
		p.bg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(closeTimeout):
		p.log.Warn("upstream clients still closing or being built after the pool closed", "timeout", closeTimeout)
	}
}

// intercept accounts for each call on c (so a released client closes once
// its calls end), logs it at debug level and reports it to the observer;
// with neither, the call goes straight through, keeping the hot path free
// of clocks and formatting.
func (p *Pool) intercept(c *Client) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		done, err := c.track()
		if err != nil {
			return err
		}
		defer done()
		obs := p.observer.Load()
		debug := p.log.Enabled(ctx, slog.LevelDebug)
		if obs == nil && !debug {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		start := time.Now()
		err = invoker(ctx, method, req, reply, cc, opts...)
		p.observe(ctx, obs, debug, c.Target, method, err, time.Since(start))
		return err
	}
}

// observe reports a finished upstream call to the observer and the debug
// log.
func (p *Pool) observe(ctx context.Context, obs *Observer, debug bool, target, method string, err error, d time.Duration) {
	if obs != nil {
		(*obs)(ctx, target, method, status.Code(err), d)
	}
	if debug {
		p.log.DebugContext(ctx, "upstream call", "upstream", target, "method", method,
			"code", status.Code(err).String(), "duration", d)
	}
}
