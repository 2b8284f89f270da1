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
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
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
}

// Options configures a Store.
type Options struct {
	// Folder holds <name>.yaml files.
	Folder string
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
	// Now is the clock; nil means time.Now (tests replace it).
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

	mu        sync.Mutex
	entries   map[string]*entry
	lastSweep time.Time
}

// stamp identifies a file version without reading it. Kubernetes updates a
// mounted Secret by swapping a symlink, which changes the inode; an edit in
// place changes mtime/ctime/size.
type stamp struct {
	ino, size        uint64
	mtime, ctime     int64
	mtimeNs, ctimeNs int64
}

type entry struct {
	stamp stamp
	// data is the content conn or err was made from.
	data     []byte
	conn     *Connection
	err      error // cached load error for this stamp
	lastUsed time.Time
	// racy: the file changed less than racyWindow before it was read, so
	// a rewrite of the same size may not have changed the stamp (ctime
	// has the file system's granularity, a clock tick or a whole second).
	// A racy entry is re-read on every Get until it is old enough.
	racy bool
}

// racyWindow bounds the timestamp granularity the store trusts: a file
// whose ctime is at least this far behind the moment it was read cannot be
// rewritten without the stamp changing. It is git's "racy clean" problem.
const racyWindow = 2 * time.Second

// NewStore returns a store; nothing is read until the first Get.
func NewStore(opts Options) *Store {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	return &Store{opts: opts, entries: map[string]*entry{}}
}

// Folder returns the connection folder.
func (s *Store) Folder() string { return s.opts.Folder }

// Get returns the connection called name. The cost on a cache hit is one
// stat(2) of the file; a file whose stamp changed (inode, size, mtime or
// ctime: a rewrite, a rename over it, a chmod or touch) is read again, and
// keeps its *Connection if the content is the same.
func (s *Store) Get(name string) (*Connection, error) {
	if err := ids.ValidateConnectionName(name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidName, err)
	}
	file := filepath.Join(s.opts.Folder, name+".yaml")
	fi, err := os.Stat(file)
	if err != nil {
		s.forget(name)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: connection %q has no file %s", ErrNotFound, name, file)
		}
		err = fmt.Errorf("%w: connection %q: %v", ErrBroken, name, err)
		s.loaded(name, false, err)
		return nil, err
	}
	st := stampOf(fi)
	now := s.opts.Now()

	s.mu.Lock()
	s.sweepLocked(now)
	prev, cached := s.entries[name]
	if cached && prev.stamp == st && !prev.racy && s.opts.CacheTimeout != 0 {
		prev.lastUsed = now
		conn, err := prev.conn, prev.err
		s.mu.Unlock()
		return conn, err
	}
	s.mu.Unlock()

	// The wall clock, not opts.Now: it is compared with the file system's
	// timestamps.
	readAt := time.Now()
	data, err := os.ReadFile(file)
	var conn *Connection
	switch {
	case err != nil:
		data = nil
		err = fmt.Errorf("%w: connection %q: %v", ErrBroken, name, err)
		s.loaded(name, cached, err)
	case cached && prev.data != nil && (prev.err == nil || prev.stamp == st) && bytes.Equal(prev.data, data):
		// Same content: keep the connection, or the error of this very
		// file version (a racy entry re-read); nothing was loaded. A new
		// stamp (touch) over a failed load retries it, in case what failed
		// was outside the file, say a base path that could not be created.
		conn, err = prev.conn, prev.err
	default:
		conn, err = s.load(name, file, data)
		s.loaded(name, cached, err)
	}
	if s.opts.CacheTimeout != 0 {
		s.mu.Lock()
		s.entries[name] = &entry{
			stamp: st, data: data, conn: conn, err: err, lastUsed: now,
			racy: readAt.Sub(st.changed()) < racyWindow,
		}
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

// sweepLocked drops entries unused for longer than the cache timeout. It
// runs at most once per tenth of the timeout, so the cost is amortised and
// no background goroutine is needed.
func (s *Store) sweepLocked(now time.Time) {
	ttl := s.opts.CacheTimeout
	if ttl <= 0 || now.Sub(s.lastSweep) < ttl/10 {
		return
	}
	s.lastSweep = now
	for name, e := range s.entries {
		if now.Sub(e.lastUsed) > ttl {
			delete(s.entries, name)
		}
	}
}

// Cached reports how many connections are held in the cache.
func (s *Store) Cached() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
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

// changed is when the file last changed: its ctime, which no one can set
// back, or its mtime where there is no ctime.
func (st stamp) changed() time.Time {
	if st.ctime != 0 || st.ctimeNs != 0 {
		return time.Unix(st.ctime, st.ctimeNs)
	}
	return time.Unix(0, st.mtimeNs)
}

func stampOf(fi fs.FileInfo) stamp {
	st := stamp{size: uint64(fi.Size()), mtimeNs: fi.ModTime().UnixNano()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = sys.Ino
		st.ctime, st.ctimeNs = sys.Ctim.Sec, sys.Ctim.Nsec
		st.mtime = sys.Mtim.Sec
	}
	return st
}

// List returns the names of all connection files in the folder, sorted.
// Files whose names are not valid connection names are skipped.
func (s *Store) List() ([]string, error) {
	des, err := os.ReadDir(s.opts.Folder)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, de := range des {
		n := de.Name()
		if filepath.Ext(n) != ".yaml" || de.IsDir() {
			continue
		}
		n = n[:len(n)-len(".yaml")]
		if ids.ValidateConnectionName(n) == nil {
			names = append(names, n)
		}
	}
	// os.ReadDir sorts file names, where "a-b.yaml" < "a.yaml"; callers
	// need connection-name order.
	sort.Strings(names)
	return names, nil
}
