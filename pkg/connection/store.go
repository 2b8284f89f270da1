package connection

import (
	"context"
	"crypto/sha256"
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
	"github.com/democratic-csi/proxy-topology/pkg/ids"
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
	// ErrUnavailable: the file is valid but its upstream client could not
	// be made in time (a built-in driver whose base path hangs); the
	// registry (pkg/backend) returns it. It is never cached: the next call
	// tries again. It also wraps the context error that ended the wait.
	ErrUnavailable = errors.New("connection's upstream is not ready")
	// ErrRefused: the file loads, but the loop guard (pkg/backend) refused
	// it: a connection that routes back to this proxy. Such an error is an
	// ErrBroken too.
	ErrRefused = errors.New("connection refused by its check")
)

// Connection is one loaded, validated version of a connection file.
type Connection struct {
	Name   string
	File   string
	Config *config.Connection
	// Group is set for a file of driver: group, which has no upstream;
	// Config is then only its driver (group.go).
	Group *config.Group

	// topology is Config.Proxy.PerDriver.Topology compiled (Topology).
	topology atomic.Pointer[accessible.Compiled]

	// refs counts the store's reference and every caller's; the
	// attachment is closed when it reaches zero.
	refs     atomic.Int64
	attached atomic.Pointer[attached]
	// prev is the version this one replaced, kept (with the reference
	// its cache entry held) until this one has an attachment of its own:
	// the registry's clients of an edited file that names the same
	// upstream are then handed over, not closed and made again.
	prev atomic.Pointer[Connection]
}

// Attachment is what a user of the store keeps with one version of a
// connection for as long as it lives: the registry's upstream clients
// (pkg/backend). It is closed once the store and every caller have
// released the connection, so calls in flight finish on it.
type Attachment interface{ Close() }

type attached struct{ a Attachment }

// Attachment returns what was attached to c, or nil.
func (c *Connection) Attachment() Attachment {
	if p := c.attached.Load(); p != nil {
		return p.a
	}
	return nil
}

// Attach attaches a to c unless something is attached already; it returns
// what is attached after the call (a, or what another caller attached
// first, which the caller then uses instead of a). The caller must hold a
// reference to c.
func (c *Connection) Attach(a Attachment) Attachment {
	if c.attached.CompareAndSwap(nil, &attached{a}) {
		c.releasePrev()
		return a
	}
	return c.attached.Load().a
}

// releasePrev lets the version c replaced go.
func (c *Connection) releasePrev() {
	if p := c.prev.Swap(nil); p != nil {
		p.Release()
	}
}

// Release gives back the reference Get handed out. Once the store and
// every caller have released a Connection, its attachment is closed; it
// must not be used after that.
func (c *Connection) Release() {
	if c.refs.Add(-1) == 0 {
		if a := c.Attachment(); a != nil {
			a.Close()
		}
		c.releasePrev()
	}
}

// tryAcquire adds a reference unless the Connection is already released.
func (c *Connection) tryAcquire() bool {
	for {
		n := c.refs.Load()
		if n <= 0 {
			return false
		}
		if c.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Topology returns the connection's topology list (and upstreamTopology,
// and whether it is node-local) compiled for opts. It is
// built on first use and kept with the connection, so a call only matches
// terms against it; a reload makes a new Connection and so a new one.
func (c *Connection) Topology(opts accessible.Options) *accessible.Compiled {
	if t := c.topology.Load(); t != nil && t.Options() == opts {
		return t
	}
	t := accessible.CompileSpec(c.Config.Topology(), opts)
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
	// positive drops a connection unused for that long. Whatever it is, a
	// connection (and its attachment) is kept while its file is unchanged
	// (with 0, while the bytes read are the same), and released when the
	// file changes, goes away or the connection expires.
	CacheTimeout time.Duration
	// Topology is used to validate the connections' topology entries.
	Topology accessible.Options
	Log      *slog.Logger
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
	// sum is the SHA-256 of the content conn or err was made from, and
	// read says whether there was content at all (a read error has none).
	// A cached connection keeps the digest rather than the file: at ten
	// thousand connections the files cost more memory than the rest of
	// an entry.
	sum  [sha256.Size]byte
	read bool
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

// Get returns the connection called name, with a reference the caller
// must give back with Release when its call is done. On a cache hit it
// costs one Source.Stat (for a folder, one stat(2)); a new version is read
// again, and keeps its *Connection if the content is the same. A load only
// parses and validates: ctx is for sources that may block.
func (s *Store) Get(ctx context.Context, name string) (*Connection, error) {
	if err := ids.ValidateConnectionName(name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidName, err)
	}
	now := s.opts.Now()
	ver, err := s.src.Stat(name, now)
	if err != nil {
		s.forget(name, nil)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, noFile(name, s.src.Describe(name))
		}
		err = Broken(name, err)
		s.loaded(name, false, err)
		return nil, err
	}
	at := int64(now.Sub(s.epoch))
	s.sweep(now, at)

	// With cacheTimeout 0 the entry is never trusted: the file is read
	// on every call, and only the connection of the same bytes is kept.
	s.mu.RLock()
	prev, cached := s.entries[name]
	if cached && s.opts.CacheTimeout != 0 && prev.version == ver {
		prev.lastUsed.Store(at)
		conn, err := prev.conn, prev.err
		if conn != nil {
			// The entry holds a reference while it is in the map.
			conn.refs.Add(1)
		}
		s.mu.RUnlock()
		return conn, err
	}
	s.mu.RUnlock()

	data, err := s.src.Read(name)
	var conn *Connection
	fresh := false // conn was made by this Get
	// With cacheTimeout 0 every read counts as a load for OnLoad, as if
	// nothing were kept, and none as a reload.
	reload := cached && s.opts.CacheTimeout != 0
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.forget(name, nil)
		return nil, noFile(name, s.src.Describe(name))
	case err != nil:
		data = nil
		err = Broken(name, err)
		s.loaded(name, reload, err)
	case cached && prev.read && s.sameContent(prev, ver, data) && (prev.conn == nil || prev.conn.tryAcquire()):
		// Same content: keep the connection, or the error of this very
		// version (a racy file re-read); nothing was loaded. A new version
		// (touch) over a failed load retries it, in case what failed was
		// outside the file, say a base path that could not be created.
		conn, err = prev.conn, prev.err
		if s.opts.CacheTimeout == 0 {
			s.loaded(name, false, err)
		}
	default:
		conn, err = s.load(name, s.src.Describe(name), data, false)
		fresh = conn != nil
		s.loaded(name, reload, err)
	}
	e := &entry{version: ver, read: data != nil, conn: conn, err: err}
	if e.read {
		e.sum = sha256.Sum256(data)
	}
	e.lastUsed.Store(at)
	if conn != nil {
		conn.refs.Add(1) // the entry's reference
	}
	s.mu.Lock()
	old := s.entries[name]
	if fresh && old != nil && old.conn != nil && old.conn.Attachment() != nil {
		// conn takes over the entry's reference to the version it
		// replaces, until conn has an attachment (Attach); no one sees
		// conn before the lock is released.
		conn.prev.Store(old.conn)
		old = nil
	}
	s.entries[name] = e
	s.mu.Unlock()
	old.release()
	return conn, err
}

// sameContent reports whether data, read for version ver, is what prev
// was made from, and prev's result may be reused for it.
func (s *Store) sameContent(prev *entry, ver Version, data []byte) bool {
	if prev.err != nil && (s.opts.CacheTimeout == 0 || !sameFileVersion(prev.version, ver)) {
		return false
	}
	return prev.sum == sha256.Sum256(data)
}

// release drops the entry's reference to its connection; e may be nil.
func (e *entry) release() {
	if e != nil && e.conn != nil {
		e.conn.Release()
	}
}

func (s *Store) loaded(name string, reload bool, err error) {
	if s.opts.OnLoad != nil {
		s.opts.OnLoad(name, reload, err)
	}
}

// forget drops the entry of name, if it is e (any entry when e is nil).
func (s *Store) forget(name string, e *entry) {
	s.mu.Lock()
	old, ok := s.entries[name]
	if ok && (e == nil || old == e) {
		delete(s.entries, name)
	} else {
		old = nil
	}
	s.mu.Unlock()
	old.release()
}

// removedSweepInterval is how often, with no cache timeout to sweep by,
// the store looks for cached connections whose file is gone.
const removedSweepInterval = time.Minute

// sweep drops entries unused for longer than the cache timeout and entries
// whose file is gone, releasing their upstream clients; now and at (since
// epoch) are the time of the Get. It runs at most once per tenth of the
// timeout, and at most once a minute, so the cost is amortised and no
// background goroutine is needed. When no sweep is due it costs one atomic
// load, and no lock. Files are looked at without the lock held.
func (s *Store) sweep(now time.Time, at int64) {
	if !s.sweepDue(at) {
		return
	}
	s.mu.Lock()
	// Another Get may have swept since the check above.
	if !s.sweepDue(at) {
		s.mu.Unlock()
		return
	}
	s.lastSweep.Store(at)
	var expired []*entry
	kept := map[string]*entry{}
	for name, e := range s.entries {
		if s.expired(e, at) {
			delete(s.entries, name)
			expired = append(expired, e)
		} else {
			kept[name] = e
		}
	}
	s.mu.Unlock()
	for _, e := range expired {
		e.release()
	}
	for name, e := range kept {
		if _, err := s.src.Stat(name, now); errors.Is(err, fs.ErrNotExist) {
			s.forget(name, e)
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
	every := removedSweepInterval
	if ttl := s.opts.CacheTimeout; ttl > 0 {
		every = min(every, ttl/10)
	}
	return last == neverSwept || time.Duration(at-last) >= every
}

// Cached reports how many connections are in the cache now: entries unused
// for longer than the cache timeout are not counted, even before a Get
// sweeps them out, so the proxy_topology_connections_cached gauge falls as
// soon as they expire rather than at the next call. With cacheTimeout 0
// nothing is served from the cache, and it is 0.
func (s *Store) Cached() int {
	if s.opts.CacheTimeout == 0 {
		return 0
	}
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

// Close drops every cached connection, releasing their upstream clients
// once the calls using them are done. The store may be used again after.
func (s *Store) Close() {
	s.mu.Lock()
	entries := s.entries
	s.entries = map[string]*entry{}
	s.mu.Unlock()
	for _, e := range entries {
		e.release()
	}
}

// load makes the Connection of a file's content, with the caller's
// reference. quiet logs nothing: a Look's user reports what it finds,
// every round.
func (s *Store) load(name, file string, data []byte, quiet bool) (*Connection, error) {
	f, err := config.ParseFile(file, data, s.opts.Topology)
	if f.Group != nil {
		return s.loadGroup(name, file, f.Group, quiet)
	}
	cfg := f.Connection
	for _, w := range f.Warnings {
		if !quiet {
			s.opts.Log.Warn(w, "connection", name)
		}
	}
	if err != nil {
		if !quiet {
			s.opts.Log.Error("connection file is invalid", "connection", name, "error", err)
		}
		return nil, Broken(name, err)
	}
	c := &Connection{Name: name, File: file, Config: cfg}
	c.refs.Store(1) // the caller's
	if !quiet {
		s.opts.Log.Debug("connection loaded", "connection", name, "driver", cfg.Driver)
	}
	return c, nil
}

// List returns the names of all connections in the source, sorted.
func (s *Store) List() ([]string, error) { return s.src.List() }

// noFile is the error of a connection whose file does not exist: Get,
// Survey.Look and Inspect say the same.
func noFile(name, file string) error {
	return fmt.Errorf("%w: connection %q has no file %s", ErrNotFound, name, file)
}

// Broken is the error of a connection whose file cannot be read or does
// not load, or that cannot be used as it is, naming it.
func Broken(name string, err error) error {
	return fmt.Errorf("%w: connection %q: %v", ErrBroken, name, err)
}
