package backend

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/democratic-csi/proxy-topology/internal/syncbuf"
	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
	"github.com/democratic-csi/proxy-topology/pkg/nodetopology"
	"github.com/democratic-csi/proxy-topology/pkg/upstream"
)

// Two connection files, one per upstream socket (nothing listens on
// them: a client is made without dialling).
const (
	connA = "driver: csi\ncsi:\n  endpoint: unix:///csi/a.sock\n"
	connB = "driver: csi\ncsi:\n  endpoint: unix:///csi/b.sock\n"
)

// env is one registry over a catalogue of a private folder, with its own
// pool and clock.
type env struct {
	testkit.Folder
	t     *testing.T
	store *connection.Store
	reg   *Registry
	pool  *upstream.Pool
	clock *testingclock.FakeClock // Options.Now under the test's control
	log   *syncbuf.Buffer
	loads atomic.Int64 // the catalogue's loads (OnLoad calls)
}

func newEnv(t *testing.T, cacheTimeout time.Duration) *env {
	t.Helper()
	e := &env{
		Folder: testkit.NewFolder(t),
		t:      t,
		clock:  testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		log:    &syncbuf.Buffer{},
	}
	log := slog.New(slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e.pool = upstream.NewPool(log)
	t.Cleanup(e.pool.Close)
	e.store = connection.NewStore(connection.Options{
		Folder:       e.Dir,
		CacheTimeout: cacheTimeout,
		Topology:     accessible.Options{Prefix: nodetopology.DefaultPrefix, Type: nodetopology.TypeCluster},
		Log:          log,
		Now:          e.clock.Now,
		OnLoad:       func(string, bool, error) { e.loads.Add(1) },
	})
	e.reg = New(Options{
		Catalogue:  e.store,
		Pool:       e.pool,
		NodeID:     "node-1",
		DriverName: "proxy.example.com",
		Version:    "v-test",
		Log:        log,
	})
	return e
}

// get returns a connection that must load, with its clients, as a call
// that has ended: its reference is given back, so only the catalogue keeps
// it (and its clients). Its Config stays readable.
func (e *env) get(name string) *Conn {
	e.t.Helper()
	c, release, err := e.reg.Get(context.Background(), name)
	if err != nil {
		e.t.Fatalf("Get(%q): %v", name, err)
	}
	if c == nil {
		e.t.Fatalf("Get(%q) returned nil and no error", name)
	}
	release()
	return c
}

func (e *env) loadCount() int { return int(e.loads.Load()) }
