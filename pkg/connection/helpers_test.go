package connection

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/democratic-csi/proxy-topology/internal/syncbuf"
	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/nodetopology"
)

// Two connection files of the same size that differ only in the endpoint,
// so a rewrite from one to the other changes neither size nor (after
// os.Chtimes) mtime.
const (
	connA = "driver: csi\ncsi:\n  endpoint: unix:///csi/a.sock\n"
	connB = "driver: csi\ncsi:\n  endpoint: unix:///csi/b.sock\n"
)

func init() {
	if len(connA) != len(connB) {
		panic("connA and connB must have the same size")
	}
}

// syncBuffer is a log sink safe for concurrent Get calls.
type syncBuffer = syncbuf.Buffer

// env is one store over a private folder with its own clock. Every
// connection its get returns carries a probe attachment, standing for the
// registry's clients, so a test sees when a version is let go.
type env struct {
	testkit.Folder
	t     *testing.T
	store *Store
	clock *testingclock.FakeClock // Options.Now under the test's control
	log   *syncBuffer
	loads []loadEvent // OnLoad calls, in order
	mu    sync.Mutex
	// open counts probes attached and not yet closed.
	open atomic.Int64
}

// probe is an Attachment that counts itself open until closed.
type probe struct {
	e      *env
	closed atomic.Bool
}

func (p *probe) Close() {
	if !p.closed.CompareAndSwap(false, true) {
		panic("attachment closed twice")
	}
	p.e.open.Add(-1)
}

// attach gives c a probe unless it has an attachment already.
func (e *env) attach(c *Connection) {
	if c.Attachment() != nil {
		return
	}
	p := &probe{e: e}
	e.open.Add(1)
	if c.Attach(p) != Attachment(p) {
		e.open.Add(-1) // another caller attached first
	}
}

// closed reports whether c's attachment was closed.
func closed(c *Connection) bool {
	p, ok := c.Attachment().(*probe)
	return ok && p.closed.Load()
}

type loadEvent struct {
	name   string
	reload bool
	failed bool
}

func newEnv(t *testing.T, cacheTimeout time.Duration) *env {
	t.Helper()
	e := &env{
		Folder: testkit.NewFolder(t),
		t:      t,
		clock:  testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		log:    &syncBuffer{},
	}
	log := slog.New(slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e.store = NewStore(Options{
		Folder:       e.Dir,
		CacheTimeout: cacheTimeout,
		Topology:     accessible.Options{Prefix: nodetopology.DefaultPrefix, Type: nodetopology.TypeCluster},
		Log:          log,
		Now:          e.clock.Now,
		OnLoad: func(name string, reload bool, err error) {
			e.mu.Lock()
			e.loads = append(e.loads, loadEvent{name, reload, err != nil})
			e.mu.Unlock()
		},
	})
	return e
}

// get returns a connection that must load, with a probe attached, as a
// call that has ended: its reference is given back, so only the store
// keeps it (and its attachment). Its Config stays readable.
func (e *env) get(name string) *Connection {
	e.t.Helper()
	c, err := e.store.Get(context.Background(), name)
	if err != nil {
		e.t.Fatalf("Get(%q): %v", name, err)
	}
	if c == nil {
		e.t.Fatalf("Get(%q) returned nil and no error", name)
	}
	e.attach(c)
	c.Release()
	return c
}

// endpoint is the controller endpoint name's connection loads with.
func (e *env) endpoint(name string) string {
	e.t.Helper()
	return e.get(name).Config.CSI.Endpoint
}

func (e *env) loadCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.loads)
}

// secret lays out files the way the kubelet's AtomicWriter mounts a Secret
// or ConfigMap: the data in a timestamped directory, "..data" a symlink to
// it, and each name.yaml a symlink to "..data/name.yaml". Each call is one
// update: a new directory, and a new "..data" renamed over the old one.
func (e *env) secret(generation int, files map[string]string) {
	e.t.Helper()
	gen := filepath.Join(e.Dir, "..gen"+string(rune('0'+generation)))
	if err := os.Mkdir(gen, 0o755); err != nil {
		e.t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(gen, name+".yaml"), []byte(content), 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
	tmp := filepath.Join(e.Dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(gen), tmp); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(e.Dir, "..data")); err != nil {
		e.t.Fatal(err)
	}
	for name := range files {
		link := e.Path(name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name+".yaml"), link); err != nil {
			e.t.Fatal(err)
		}
	}
}

// member is Member with the store's Get, as the registry finds members.
func (e *env) member(g *Connection, i int) (*Connection, error) {
	return Member(g, i, func(name string) (*Connection, error) { return e.store.Get(context.Background(), name) })
}
