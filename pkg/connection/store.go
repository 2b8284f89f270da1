// Package connection resolves connection names to loaded, validated
// connection files and their upstream clients, reloading a file as soon as
// it changes and caching it for the configured time.
package connection

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/config"
	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
	"github.com/democratic-csi/proxy-topology/pkg/ids"
	"github.com/democratic-csi/proxy-topology/pkg/upstream"
)

// Sentinel errors; the CSI layer maps them to status codes.
var (
	// ErrInvalidName: the name can never be a connection (bad characters,
	// too long). It never reaches the file system.
	ErrInvalidName = errors.New("invalid connection name")
	// ErrNotFound: no <name>.yaml in the folder.
	ErrNotFound = errors.New("connection not found")
	// ErrBroken: the file exists but does not load or validate.
	ErrBroken = errors.New("connection file is invalid")
)

// Connection is a loaded connection with its upstream clients.
type Connection struct {
	Name   string
	File   string
	Config *config.Connection
	// Controller serves controller calls, Node serves node calls; they are
	// the same client unless csi.nodeEndpoint differs from csi.endpoint.
	Controller *upstream.Client
	Node       *upstream.Client

	// topology is Config.Proxy.PerDriver.Topology compiled (Topology).
	topology atomic.Pointer[accessible.Compiled]
}

// Topology returns the connection's topology list compiled for opts. It is
// built on first use and kept with the connection, so a call only matches
// terms against it; a reload makes a new Connection and so a new one.
func (c *Connection) Topology(opts accessible.Options) *accessible.Compiled {
	if t := c.topology.Load(); t != nil && t.Options() == opts {
		return t
	}
	t := accessible.Compile(c.Config.Proxy.PerDriver.Topology, opts)
	c.topology.Store(t)
	return t
}

// Options configures a Store.
type Options struct {
	// Folder holds <name>.yaml files; used when Source is nil.
	Folder string
	// Source supplies connection files; nil means NewFolderSource(Folder).
	Source Source
	// CacheTimeout: 0 re-reads on every call, negative caches forever,
	// positive drops a connection unused for that long.
	CacheTimeout time.Duration
	// Topology is used to validate the connections' topology entries.
	Topology accessible.Options
	// NodeID is given to built-in local-hostpath drivers.
	NodeID string
	// DriverName and Version are given to built-in drivers.
	DriverName, Version string
	Pool                *upstream.Pool
	Log                 *slog.Logger
	// Now is the clock; nil means time.Now (tests replace it). It is read
	// once per Get and also given to Source.Stat, which compares it with
	// file times.
	Now func() time.Time
	// OnLoad, if set, is called after every read of a connection file:
	// reload is true when the file replaced a cached version of itself,
	// err is the load error. Metrics count loads with it; nil means no
	// one is told.
	OnLoad func(name string, reload bool, err error)
}

// Store loads connections on first use and keeps them fresh.
type Store struct {
	opts Options
	src  Source

	// epoch is the clock reading at NewStore. Times are kept as durations
	// since it, so they fit in atomics; a duration between two time.Now
	// readings uses the monotonic clock, as time.Time.Sub does.
	epoch time.Time

	// mu guards entries. A cache hit takes only the read lock; entries
	// are replaced, never changed, except for their lastUsed.
	mu      sync.RWMutex
	entries map[string]*entry
	// lastSweep is when the last sweep ran (since epoch), or neverSwept.
	// A Get reads it without the lock to see whether a sweep is due.
	lastSweep atomic.Int64
}

// neverSwept is lastSweep before the first sweep: the first Get sweeps.
const neverSwept = math.MinInt64

type entry struct {
	// version is the source's version of the content below.
	version Version
	// data is the content conn or err was made from.
	data []byte
	conn *Connection
	err  error // cached load error for this version
	// lastUsed is when the entry was last returned (since the store's
	// epoch). A hit stores it under the read lock, so a sweep, which holds
	// the write lock, sees either the hit or none of it.
	lastUsed atomic.Int64
}

// NewStore returns a store; nothing is read until the first Get.
func NewStore(opts Options) *Store {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Source == nil {
		opts.Source = NewFolderSource(opts.Folder)
	}
	s := &Store{opts: opts, src: opts.Source, epoch: opts.Now(), entries: map[string]*entry{}}
	s.lastSweep.Store(neverSwept)
	return s
}

// Location names where connections come from, for messages.
func (s *Store) Location() string {
	if str, ok := s.src.(fmt.Stringer); ok {
		return str.String()
	}
	return "connection source"
}

// Get returns the connection called name. On a cache hit it costs one
// Source.Stat (for a folder, one stat(2)); a new version is read again, and
// keeps its *Connection if the content is the same.
func (s *Store) Get(name string) (*Connection, error) {
	if err := ids.ValidateConnectionName(name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidName, err)
	}
	now := s.opts.Now()
	ver, err := s.src.Stat(name, now)
	if err != nil {
		s.forget(name)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: connection %q has no file %s", ErrNotFound, name, s.src.Describe(name))
		}
		err = fmt.Errorf("%w: connection %q: %v", ErrBroken, name, err)
		s.loaded(name, false, err)
		return nil, err
	}
	at := int64(now.Sub(s.epoch))

	// With cacheTimeout 0 nothing is ever stored, so there is nothing to
	// sweep or find.
	var prev *entry
	var cached bool
	if s.opts.CacheTimeout != 0 {
		s.sweep(at)
		s.mu.RLock()
		prev, cached = s.entries[name]
		if cached && prev.version == ver {
			prev.lastUsed.Store(at)
			s.mu.RUnlock()
			return prev.conn, prev.err
		}
		s.mu.RUnlock()
	}

	data, err := s.src.Read(name)
	var conn *Connection
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.forget(name)
		return nil, fmt.Errorf("%w: connection %q has no file %s", ErrNotFound, name, s.src.Describe(name))
	case err != nil:
		data = nil
		err = fmt.Errorf("%w: connection %q: %v", ErrBroken, name, err)
		s.loaded(name, cached, err)
	case cached && prev.data != nil && (prev.err == nil || sameFileVersion(prev.version, ver)) && bytes.Equal(prev.data, data):
		// Same content: keep the connection, or the error of this very
		// version (a racy file re-read); nothing was loaded. A new version
		// (touch) over a failed load retries it, in case what failed was
		// outside the file, say a base path that could not be created.
		conn, err = prev.conn, prev.err
	default:
		conn, err = s.load(name, s.src.Describe(name), data)
		s.loaded(name, cached, err)
	}
	if s.opts.CacheTimeout != 0 {
		e := &entry{version: ver, data: data, conn: conn, err: err}
		e.lastUsed.Store(at)
		s.mu.Lock()
		s.entries[name] = e
		s.mu.Unlock()
	}
	return conn, err
}

func (s *Store) loaded(name string, reload bool, err error) {
	if s.opts.OnLoad != nil {
		s.opts.OnLoad(name, reload, err)
	}
}

func (s *Store) forget(name string) {
	s.mu.Lock()
	delete(s.entries, name)
	s.mu.Unlock()
}

// sweep drops entries unused for longer than the cache timeout; at is now,
// since epoch. It runs at most once per tenth of the timeout, so the cost
// is amortised and no background goroutine is needed. When no sweep is
// due it costs one atomic load, and no lock.
func (s *Store) sweep(at int64) {
	ttl := s.opts.CacheTimeout
	if ttl <= 0 || !s.sweepDue(at) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Another Get may have swept since the check above.
	if !s.sweepDue(at) {
		return
	}
	s.lastSweep.Store(at)
	for name, e := range s.entries {
		if s.expired(e, at) {
			delete(s.entries, name)
		}
	}
}

// expired reports whether e has gone unused for longer than the cache
// timeout at at (since epoch).
func (s *Store) expired(e *entry, at int64) bool {
	ttl := s.opts.CacheTimeout
	return ttl > 0 && time.Duration(at-e.lastUsed.Load()) > ttl
}

func (s *Store) sweepDue(at int64) bool {
	last := s.lastSweep.Load()
	return last == neverSwept || time.Duration(at-last) >= s.opts.CacheTimeout/10
}

// Cached reports how many connections are in the cache now: entries unused
// for longer than the cache timeout are not counted, even before a Get
// sweeps them out, so the proxy_topology_connections_cached gauge falls as
// soon as they expire rather than at the next call.
func (s *Store) Cached() int {
	at := int64(s.opts.Now().Sub(s.epoch))
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 0
	for _, e := range s.entries {
		if !s.expired(e, at) {
			n++
		}
	}
	return n
}

func (s *Store) load(name, file string, data []byte) (*Connection, error) {
	cfg, warnings, err := config.ParseConnection(file, data, s.opts.Topology)
	for _, w := range warnings {
		s.opts.Log.Warn(w, "connection", name)
	}
	if err != nil {
		s.opts.Log.Error("connection file is invalid", "connection", name, "error", err)
		return nil, fmt.Errorf("%w: connection %q: %v", ErrBroken, name, err)
	}
	c := &Connection{Name: name, File: file, Config: cfg}
	switch cfg.Driver {
	case config.DriverCSI:
		if c.Controller, err = s.opts.Pool.CSI(cfg.CSI.Endpoint); err == nil {
			c.Node, err = s.opts.Pool.CSI(cfg.CSI.NodeSideEndpoint())
		}
	case config.DriverLocalHostpath:
		c.Controller, err = s.opts.Pool.Local(hostpath.Options{
			DriverName:        s.opts.DriverName,
			Version:           s.opts.Version,
			NodeID:            s.opts.NodeID,
			BasePath:          cfg.LocalHostpath.ShareBasePath,
			Stage:             cfg.LocalHostpath.Stage,
			ControllerPublish: cfg.LocalHostpath.ControllerPublish,
			Logger:            s.opts.Log,
		})
		c.Node = c.Controller
	}
	if err != nil {
		return nil, fmt.Errorf("%w: connection %q: %v", ErrBroken, name, err)
	}
	s.opts.Log.Debug("connection loaded", "connection", name, "driver", cfg.Driver)
	return c, nil
}

// List returns the names of all connections in the source, sorted.
func (s *Store) List() ([]string, error) { return s.src.List() }
