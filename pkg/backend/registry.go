package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/democratic-csi/proxy-topology/pkg/config"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
	"github.com/democratic-csi/proxy-topology/pkg/upstream"
)

// Conn is a connection with the upstream clients that serve it: what a
// CSI call is routed to. It embeds the catalogue's Connection (Name,
// Config, Group, IsGroup, Topology…). A request has one only between
// Registry.Get (or Member) and the release function Get returned with it.
type Conn struct {
	*connection.Connection
	// Controller serves controller calls, Node serves node calls; they are
	// the same client unless csi.nodeEndpoint differs from csi.endpoint,
	// and nil for a group.
	Controller *upstream.Client
	Node       *upstream.Client

	// leases keep Controller and Node open; Close (the connection's last
	// release) gives them back. A Survey's Conn holds none: the survey
	// does.
	leases []*upstream.Lease
}

// Close releases the clients; the catalogue calls it once the connection
// version is released by the store and by every caller.
func (c *Conn) Close() {
	for _, l := range c.leases {
		l.Release()
	}
}

// Options configures a Registry.
type Options struct {
	// Catalogue holds the connection files: required by Get, Member,
	// List, Location and Survey; a registry used only to Build clients
	// for connections its caller parsed (the check command) needs none.
	Catalogue *connection.Store
	// Pool shares upstream clients between connections. Required.
	Pool *upstream.Pool
	// Guard, if set, refuses a driver: csi connection that routes back to
	// this proxy while its latest check (when its clients are built, and
	// each re-check, Guard.CheckIn) refused it; nil checks nothing.
	Guard *SelfGuard
	// BuildTimeout bounds the wait for a connection's upstream client to
	// be made (a built-in driver touches its base path, which may hang);
	// 0 means 10s. The connection's csi.timeout, when shorter, and the
	// caller's deadline bound it too.
	BuildTimeout time.Duration
	// NodeID is given to built-in local-hostpath drivers, through each
	// connection's proxy.perDriver.nodeId.
	NodeID string
	// DriverName and Version are given to built-in drivers.
	DriverName, Version string
	// Log receives the registry's messages; nil means slog.Default().
	Log *slog.Logger
}

// Registry is the one place upstream clients are made for connections.
type Registry struct {
	opts Options
	cat  *connection.Store
}

// New returns a registry over opts.Catalogue.
func New(opts Options) *Registry {
	if opts.BuildTimeout == 0 {
		opts.BuildTimeout = 10 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	return &Registry{opts: opts, cat: opts.Catalogue}
}

// List names the connections that exist, sorted.
func (r *Registry) List() ([]string, error) { return r.cat.List() }

// Guard is the registry's loop guard (Options.Guard), nil when it has
// none.
func (r *Registry) Guard() *SelfGuard { return r.opts.Guard }

// Location names where connections come from, for messages.
func (r *Registry) Location() string { return r.cat.Location() }

// Get returns the connection called name with its clients, and the
// function that releases them, which the caller calls (defer release())
// once its use is done: get, use, release. On
// a cache hit it costs the catalogue's Get (one stat) and an atomic load;
// the clients of a new version of the file are built once, by the first
// call that needs them, and live as long as that version does. ctx bounds
// the wait for them (see Options.BuildTimeout). Errors wrap the
// catalogue's sentinels (pkg/connection), which pkg/csi maps to gRPC
// codes.
func (r *Registry) Get(ctx context.Context, name string) (*Conn, func(), error) {
	b, err := r.get(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	return b, b.Connection.Release, nil
}

// get is Get with the reference held by the Conn: its caller releases it
// with b.Connection.Release.
func (r *Registry) get(ctx context.Context, name string) (*Conn, error) {
	c, err := r.cat.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	b, err := r.bind(ctx, c)
	if err != nil {
		c.Release()
		return nil, err
	}
	if g := r.opts.Guard; g != nil {
		if why := g.Refused(name); why != nil {
			c.Release()
			return nil, refused{fmt.Sprintf("connection %q is refused: %v", name, why)}
		}
	}
	return b, nil
}

// Member returns member i of group g with its clients and their release
// function, as Get does; its errors are connection.Member's.
func (r *Registry) Member(ctx context.Context, g *Conn, i int) (*Conn, func(), error) {
	b, err := connection.Member(g.Connection, i, func(name string) (*Conn, error) { return r.get(ctx, name) })
	if err != nil {
		return nil, nil, err
	}
	return b, b.Connection.Release, nil
}

// bind returns the Conn attached to c, building its clients on the first
// call for this version of the file. A build that failed is not attached,
// so the next call tries again. The loop guard checks a driver: csi
// connection once per version here, and again with every capability
// refresh; its verdict is kept by the guard, not by the version, so Get
// refuses the connection only while the latest check refused it. A
// version that is no driver: csi connection (rewritten as local-hostpath
// or group) cannot route back, and clears a refusal of an earlier one.
func (r *Registry) bind(ctx context.Context, c *connection.Connection) (*Conn, error) {
	if a, ok := c.Attachment().(*Conn); ok {
		return a, nil
	}
	b, err := r.build(ctx, c, nil)
	if err != nil {
		return nil, err
	}
	if g := r.opts.Guard; g != nil {
		if c.Config.Driver != config.DriverCSI {
			g.Forget(c.Name)
		} else if err := g.Check(ctx, b); err != nil {
			// The clients are kept: a later check that passes makes the
			// connection usable without another build.
			r.opts.Log.Error("connection refused", "connection", c.Name, "error", err)
		}
	}
	a := c.Attach(b).(*Conn)
	if a != b {
		b.Close() // another call attached its build first
	}
	return a, nil
}

// Build makes the clients of c for a caller that keeps them to itself
// (the check command, which asks each connection's upstream once): nothing
// is cached, attached or checked by the loop guard. Close the Conn to
// release the clients.
func (r *Registry) Build(ctx context.Context, c *connection.Connection) (*Conn, error) {
	return r.build(ctx, c, nil)
}

// build makes the clients of c. With a survey they are leased for the
// survey (which holds one lease per client) rather than for the Conn, and
// nothing is logged.
func (r *Registry) build(ctx context.Context, c *connection.Connection, v *Survey) (*Conn, error) {
	b := &Conn{Connection: c}
	if c.IsGroup() {
		return b, nil
	}
	cfg := c.Config
	bound := r.opts.BuildTimeout
	if t := cfg.CSI.Timeout; t > 0 && t < bound {
		bound = t
	}
	bctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	lease := func(l *upstream.Lease, err error) (*upstream.Client, error) {
		if err != nil {
			return nil, err
		}
		if v != nil {
			return v.hold(l), nil
		}
		b.leases = append(b.leases, l)
		return l.Client(), nil
	}
	var target string
	var err error
	switch cfg.Driver {
	case config.DriverCSI:
		target = cfg.CSI.Endpoint
		b.Controller, err = lease(r.opts.Pool.CSI(bctx, c.Name, cfg.CSI.Endpoint))
		if node := cfg.CSI.NodeSideEndpoint(); err == nil && node != cfg.CSI.Endpoint {
			target = node
			b.Node, err = lease(r.opts.Pool.CSI(bctx, c.Name, node))
		} else {
			b.Node = b.Controller
		}
	case config.DriverLocalHostpath:
		target = "local-hostpath:" + cfg.LocalHostpath.ShareBasePath
		b.Controller, err = lease(r.opts.Pool.Local(bctx, c.Name, r.localOptions(c.Name, cfg)))
		b.Node = b.Controller
	}
	if err == nil {
		return b, nil
	}
	b.Close()
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		why := "the call ended first"
		if ctx.Err() == nil {
			why = fmt.Sprintf("not ready within %s", bound)
			if cfg.Driver == config.DriverLocalHostpath {
				why += "; is the base path on a hung mount?"
			}
		}
		if v == nil {
			r.opts.Log.Warn("connection's upstream is not ready", "connection", c.Name, "upstream", target, "error", err)
		}
		return nil, fmt.Errorf("%w: connection %q (endpoint %s): %s: %w", connection.ErrUnavailable, c.Name, target, why, err)
	}
	return nil, connection.Broken(c.Name, err)
}

// localOptions are the built-in driver's settings for the local-hostpath
// connection name.
func (r *Registry) localOptions(name string, cfg *config.Connection) hostpath.Options {
	return hostpath.Options{
		Connection: name,
		DriverName: r.opts.DriverName,
		Version:    r.opts.Version,
		// The id the proxy sends the driver in ControllerPublish is the
		// connection's translation of the node name, so the driver must
		// know its own node by that id.
		NodeID:            cfg.Proxy.PerDriver.NodeID.Render(r.opts.NodeID),
		Shared:            len(cfg.Proxy.PerDriver.Topology) > 0,
		BasePath:          cfg.LocalHostpath.ShareBasePath,
		Stage:             cfg.LocalHostpath.Stage,
		ControllerPublish: cfg.LocalHostpath.ControllerPublish,
		Logger:            r.opts.Log,
	}
}

// refused is a connection the loop guard refused: it reads as its message,
// and errors.Is finds both connection.ErrBroken (the CSI layer's
// FAILED_PRECONDITION) and connection.ErrRefused in it.
type refused struct{ msg string }

func (e refused) Error() string { return e.msg }

func (e refused) Is(target error) bool {
	return target == connection.ErrBroken || target == connection.ErrRefused
}
