package backend

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/democratic-csi/proxy-topology/pkg/connection"
)

func localConn(base string, stage bool) string {
	return fmt.Sprintf("driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\n  stage: %t\n", base, stage)
}

// wantTargets checks the pool's clients, in any order.
func (e *env) wantTargets(what string, want ...string) {
	e.t.Helper()
	got := e.pool.Targets()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		e.t.Errorf("%s: pool holds %v, want %v", what, got, want)
	}
}

// A local-hostpath connection edited in place (stage true -> false, same
// base path) gets a new driver on the next call; a call still running on
// the old version keeps the old driver until it ends, and then it goes.
// The defect kept the old driver until a restart.
func TestEditedLocalHostpathGetsNewDriver(t *testing.T) {
	for _, cache := range []time.Duration{0, -1, time.Hour} {
		t.Run(fmt.Sprint("cache ", cache), func(t *testing.T) {
			e := newEnv(t, cache)
			base := filepath.Join(t.TempDir(), "data")
			e.Write("local", localConn(base, true))
			old, releaseOld, err := e.reg.Get(context.Background(), "local")
			if err != nil {
				t.Fatal(err)
			}
			e.Replace("local", localConn(base, false))
			e.clock.Step(time.Second)
			cur := e.get("local")
			if cur.Config.LocalHostpath.Stage || cur.Controller == old.Controller {
				t.Fatal("the edit did not take effect on the next call: same driver")
			}
			if n := e.pool.Len(); n != 2 {
				t.Errorf("%d pool entries while a call holds the old version, want 2", n)
			}
			releaseOld()
			if n := e.pool.Len(); n != 1 {
				t.Errorf("%d pool entries once the old version's call ended, want 1", n)
			}
			if got := e.get("local"); got.Controller != cur.Controller {
				t.Error("an unchanged file got another driver")
			}
		})
	}
}

// Hundreds of edits leave one client per live connection: the defect left
// 220 pool entries after a series of edits.
func TestEditsReleaseOldClients(t *testing.T) {
	e := newEnv(t, time.Hour)
	base := filepath.Join(t.TempDir(), "data")
	for i := range 300 {
		switch i % 3 {
		case 0:
			e.Replace("x", fmt.Sprintf("driver: csi\ncsi:\n  endpoint: unix:///csi/%d.sock\n", i))
		case 1:
			e.Replace("x", localConn(base, i%2 == 0))
		case 2:
			e.Replace("x", fmt.Sprintf("driver: csi\ncsi:\n  endpoint: unix:///csi/c.sock\n  nodeEndpoint: unix:///csi/n%d.sock\n", i))
		}
		e.get("x")
		want := 1
		if i%3 == 2 {
			want = 2 // controller and node endpoints
		}
		if n := e.pool.Len(); n != want {
			t.Fatalf("edit %d: %d pool entries, want %d", i, n, want)
		}
	}
}

// A connection unused past the cache timeout releases its clients at the
// next sweep (the defect: cacheTimeoutMinutes dropped the cached file but
// not what it held).
func TestExpiredConnectionReleasesClients(t *testing.T) {
	e := newEnv(t, 10*time.Minute)
	e.Write("a", connA)
	e.Write("b", connB)
	e.get("a")
	e.clock.Step(6 * time.Minute)
	e.get("b")
	e.wantTargets("both used", "unix:///csi/a.sock", "unix:///csi/b.sock")
	e.clock.Step(5 * time.Minute)
	e.get("b")
	e.wantTargets("a unused for 11m", "unix:///csi/b.sock")
}

// A removed file releases its connection's clients: at once when it is
// asked for, else at the next sweep, with any cache timeout.
func TestRemovedConnectionReleasesClients(t *testing.T) {
	for _, cache := range []time.Duration{0, -1, time.Hour} {
		t.Run(fmt.Sprint("cache ", cache), func(t *testing.T) {
			e := newEnv(t, cache)
			e.Write("a", connA)
			e.Write("b", connB)
			e.get("a")
			e.get("b")
			if err := os.Remove(e.Path("a")); err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.Get(context.Background(), "a"); !errors.Is(err, connection.ErrNotFound) {
				t.Fatalf("Get of a removed file: %v", err)
			}
			e.wantTargets("a asked for after its removal", "unix:///csi/b.sock")

			e.Write("a", connA)
			e.get("a")
			if err := os.Remove(e.Path("b")); err != nil {
				t.Fatal(err)
			}
			e.clock.Step(time.Minute) // the catalogue looks for removed files once a minute
			e.get("a")
			e.wantTargets("b removed, never asked for again", "unix:///csi/a.sock")
		})
	}
}

// Close releases every cached connection's clients.
func TestStoreCloseReleasesClients(t *testing.T) {
	e := newEnv(t, -1)
	e.Write("a", connA)
	e.Write("b", connB)
	e.get("a")
	e.get("b")
	e.store.Close()
	if n := e.pool.Len(); n != 0 {
		t.Errorf("%d pool entries after Close, want 0", n)
	}
}
