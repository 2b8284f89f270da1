package upstream

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/endpoint"
	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
)

// Client is one upstream CSI driver. It lives as long as some connection
// holds a Lease on it (see Pool); once the last lease is released it waits
// for the calls in flight on it, then closes.
type Client struct {
	// Target names the upstream in messages: the endpoint, or
	// "local-hostpath:<base path>" for the built-in driver.
	Target string

	Identity   csi.IdentityClient
	Controller csi.ControllerClient
	Node       csi.NodeClient

	conn     *grpc.ClientConn  // nil for the built-in driver
	endpoint endpoint.Endpoint // what conn dials
	local    *localDriver      // the in-process built-in driver, if any
	// intercept is the Pool's interceptor, which calls on the built-in
	// driver run through (local.go).
	intercept grpc.UnaryClientInterceptor

	// inflight counts calls between the interceptor's start and end;
	// closing is set once the client is released, after which calls fail
	// with UNAVAILABLE instead of reaching a closed channel, and drained is
	// signalled when the last call in flight ends.
	inflight atomic.Int64
	closing  atomic.Bool
	drained  chan struct{}
	// closed is set once the client is closed (its channel, or its
	// built-in driver).
	closed atomic.Bool
	// dials counts transport connections made (see dial).
	dials atomic.Int64

	// caps is the capability cache: it lives and dies with the client,
	// and is emptied whenever the client makes a new transport connection,
	// since a new connection may reach a new (upgraded) upstream process.
	caps capCache
}

func newClient(target string) *Client {
	return &Client{Target: target, drained: make(chan struct{}, 1)}
}

// attach makes conn the client's channel. The channel is built after the
// Client because its interceptor and dialer report to it.
func (c *Client) attach(conn *grpc.ClientConn) {
	c.conn = conn
	c.Identity = csi.NewIdentityClient(conn)
	c.Controller = csi.NewControllerClient(conn)
	c.Node = csi.NewNodeClient(conn)
}

// track is the client interceptor's accounting of a call in flight: it
// refuses calls on a released client, and lets close wait for the others.
func (c *Client) track() (done func(), err error) {
	c.inflight.Add(1)
	if c.closing.Load() {
		c.end()
		return nil, status.Errorf(codes.Unavailable, "upstream %s: the client was released (its connection changed or went away); retry", c.Target)
	}
	return c.end, nil
}

func (c *Client) end() {
	if c.inflight.Add(-1) == 0 && c.closing.Load() {
		select {
		case c.drained <- struct{}{}:
		default:
		}
	}
}

// drain marks the client closing and waits until no call is in flight or
// until max has passed; it reports whether the client drained.
func (c *Client) drain(max time.Duration) bool {
	c.closing.Store(true)
	deadline := time.NewTimer(max)
	defer deadline.Stop()
	for c.inflight.Load() > 0 {
		select {
		case <-c.drained:
		case <-deadline.C:
			return false
		case <-time.After(50 * time.Millisecond):
			// A signal sent before this waiter looked is not lost: the
			// count is read again.
		}
	}
	return true
}

// capCache holds one upstream's capabilities. gen counts resets, so a
// discovery that raced with a reconnect does not store what the previous
// process advertised.
type capCache struct {
	mu         sync.Mutex
	gen        uint64
	controller map[csi.ControllerServiceCapability_RPC_Type]bool
	node       map[csi.NodeServiceCapability_RPC_Type]bool
}

// reset forgets what was discovered.
func (cc *capCache) reset() {
	cc.mu.Lock()
	cc.gen++
	cc.controller, cc.node = nil, nil
	cc.mu.Unlock()
}

// HasController reports whether the upstream advertises a controller
// capability. Capabilities are discovered on first use and cached with the
// client until it reconnects; a failed discovery is not cached, so a
// restarted upstream is asked again. A cache hit makes no call, so ctx is
// only used on a miss.
func (c *Client) HasController(ctx context.Context, capability csi.ControllerServiceCapability_RPC_Type) (bool, error) {
	caps, err := discover(&c.caps, &c.caps.controller, func() ([]csi.ControllerServiceCapability_RPC_Type, error) {
		return c.askController(ctx)
	})
	return caps[capability], err
}

// HasNode is HasController for node capabilities.
func (c *Client) HasNode(ctx context.Context, capability csi.NodeServiceCapability_RPC_Type) (bool, error) {
	caps, err := discover(&c.caps, &c.caps.node, func() ([]csi.NodeServiceCapability_RPC_Type, error) {
		return c.askNode(ctx)
	})
	return caps[capability], err
}

// RefreshController asks the upstream for its controller capabilities
// afresh and stores the answer in the cache HasController answers from, so
// the proxy's capability refresh (proxy.capabilities: auto) and the
// per-call checks read one source. An error (UNIMPLEMENTED from a
// node-only driver included) leaves the cache as it was.
func (c *Client) RefreshController(ctx context.Context) ([]csi.ControllerServiceCapability_RPC_Type, error) {
	return refresh(&c.caps, &c.caps.controller, func() ([]csi.ControllerServiceCapability_RPC_Type, error) {
		return c.askController(ctx)
	})
}

// RefreshNode is RefreshController for node capabilities.
func (c *Client) RefreshNode(ctx context.Context) ([]csi.NodeServiceCapability_RPC_Type, error) {
	return refresh(&c.caps, &c.caps.node, func() ([]csi.NodeServiceCapability_RPC_Type, error) {
		return c.askNode(ctx)
	})
}

// askController asks the upstream for its controller capabilities, in its
// order.
func (c *Client) askController(ctx context.Context) ([]csi.ControllerServiceCapability_RPC_Type, error) {
	resp, err := c.Controller.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		return nil, err
	}
	out := make([]csi.ControllerServiceCapability_RPC_Type, 0, len(resp.GetCapabilities()))
	for _, x := range resp.GetCapabilities() {
		out = append(out, x.GetRpc().GetType())
	}
	return out, nil
}

// askNode is askController for node capabilities.
func (c *Client) askNode(ctx context.Context) ([]csi.NodeServiceCapability_RPC_Type, error) {
	resp, err := c.Node.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		return nil, err
	}
	out := make([]csi.NodeServiceCapability_RPC_Type, 0, len(resp.GetCapabilities()))
	for _, x := range resp.GetCapabilities() {
		out = append(out, x.GetRpc().GetType())
	}
	return out, nil
}

// refresh asks the upstream with ask and stores the answer in *cache,
// unless the client reconnected meanwhile (the answer may be the previous
// process's). It returns the answer in the upstream's order.
func refresh[T comparable](cc *capCache, cache *map[T]bool, ask func() ([]T, error)) ([]T, error) {
	cc.mu.Lock()
	gen := cc.gen
	cc.mu.Unlock()
	types, _, err := askAndStore(cc, cache, gen, ask)
	return types, err
}

// askAndStore asks with ask and stores the answer as a set in *cache,
// unless the client reconnected since gen was read (the answer may be the
// previous process's). No lock is held while asking.
func askAndStore[T comparable](cc *capCache, cache *map[T]bool, gen uint64, ask func() ([]T, error)) ([]T, map[T]bool, error) {
	types, err := ask()
	if err != nil {
		return nil, nil, err
	}
	caps := make(map[T]bool, len(types))
	for _, t := range types {
		caps[t] = true
	}
	cc.mu.Lock()
	if cc.gen == gen {
		*cache = caps
	}
	cc.mu.Unlock()
	return types, caps, nil
}

// discover returns the capability set cached in *cache, asking the upstream
// with ask on a miss. Two callers missing at once both ask; the answers are
// the same, and neither waits for the other's call. No lock is held while
// asking.
func discover[T comparable](cc *capCache, cache *map[T]bool, ask func() ([]T, error)) (map[T]bool, error) {
	cc.mu.Lock()
	caps, gen := *cache, cc.gen
	cc.mu.Unlock()
	if caps != nil {
		return caps, nil
	}
	_, caps, err := askAndStore(cc, cache, gen, ask)
	return caps, err
}

// localDriver is the in-process built-in driver behind a Client.
type localDriver struct {
	opts   hostpath.Options
	driver *hostpath.Driver
}
