package backend

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/democratic-csi/proxy-topology/pkg/connection"
)

// look is Survey.Look of a connection that must load, released at once
// (the caller's reference); the connection stays readable.
func look(t *testing.T, v *Survey, name string) *Conn {
	t.Helper()
	c, release, err := v.Look(context.Background(), name)
	if err != nil {
		t.Fatalf("Look(%q): %v", name, err)
	}
	release()
	return c
}

// TestSurveyCachesNothing: a survey of many connection files (the
// capability refresh) leaves no entry in the cache and counts no load; it
// holds one client per distinct upstream, shared by the connections that
// name it, and gives them back when closed.
func TestSurveyCachesNothing(t *testing.T) {
	e := newEnv(t, 10*time.Minute)
	const n = 300
	for i := range n {
		e.Write(fmt.Sprintf("c%03d", i), fmt.Sprintf("driver: csi\ncsi:\n  endpoint: unix:///csi/up%d.sock\n", i%3))
	}
	v := e.reg.Survey()
	clients := map[string]*Conn{}
	for i := range n {
		c := look(t, v, fmt.Sprintf("c%03d", i))
		if first, ok := clients[c.Config.CSI.Endpoint]; ok && first.Controller != c.Controller {
			t.Fatalf("%s: a client of its own for %s, want the one %s has", c.Name, c.Config.CSI.Endpoint, first.Name)
		}
		clients[c.Config.CSI.Endpoint] = c
	}
	if got := e.store.Cached(); got != 0 {
		t.Errorf("Cached() after the survey = %d, want 0", got)
	}
	if got := v.Clients(); got != 3 {
		t.Errorf("the survey holds %d clients, want 3 (one per endpoint)", got)
	}
	if got := e.pool.Len(); got != 3 {
		t.Errorf("pool has %d clients during the survey, want 3", got)
	}
	if got := e.loadCount(); got != 0 {
		t.Errorf("%d loads counted, want 0: a survey is not a load", got)
	}
	v.Close()
	if got := e.pool.Len(); got != 0 {
		t.Errorf("pool has %d clients after the survey, want 0", got)
	}
	if _, _, err := v.Look(context.Background(), "c000"); !errors.Is(err, connection.ErrUnavailable) {
		t.Errorf("Look after Close: %v, want connection.ErrUnavailable", err)
	}
}

// TestSurveyIsNotAUse: a survey looks at a cached connection as it is,
// sharing its client with the uncached ones of the same endpoint, and
// leaves its last use alone: an unused connection expires after the cache
// timeout however often it is surveyed, and is not brought back by the
// next survey.
func TestSurveyIsNotAUse(t *testing.T) {
	const ttl = 10 * time.Minute
	e := newEnv(t, ttl)
	e.Write("a", connA)
	e.Write("a2", connA)
	a := e.get("a")
	for i := range 2 {
		e.clock.Step(4 * time.Minute)
		v := e.reg.Survey()
		if look(t, v, "a") != a {
			t.Errorf("survey after %d min: a new connection, want the cached one", 4*(i+1))
		}
		if c := look(t, v, "a2"); c.Controller != a.Controller {
			t.Error("a2 was given a client of its own, want the cached a's (same endpoint)")
		}
		if got := e.pool.Len(); got != 1 {
			t.Errorf("pool has %d clients, want 1", got)
		}
		v.Close()
	}
	if got := e.store.Cached(); got != 1 {
		t.Fatalf("Cached() = %d, want 1 (a)", got)
	}
	e.clock.Step(3 * time.Minute)
	// 11 minutes since the last Get: expired, however often it was looked at.
	if got := e.store.Cached(); got != 0 {
		t.Errorf("Cached() = %d, want 0: surveys kept a from expiring", got)
	}
	v := e.reg.Survey()
	if look(t, v, "a") == a {
		t.Error("the survey returned the expired connection")
	}
	v.Close()
	if got := e.store.Cached(); got != 0 {
		t.Errorf("Cached() after a survey of the expired a = %d, want 0", got)
	}
	// The survey swept the expired entry, so its client is closed too.
	if got := e.pool.Len(); got != 0 {
		t.Errorf("pool has %d clients, want 0", got)
	}
}

// TestSurveyErrors: a survey fails as Get does, naming the connection, and
// caches no error either.
func TestSurveyErrors(t *testing.T) {
	e := newEnv(t, 10*time.Minute)
	e.Write("broken", "driver: csi\n")
	v := e.reg.Survey()
	defer v.Close()
	for _, tc := range []struct {
		name string
		want error
	}{
		{"broken", connection.ErrBroken},
		{"absent", connection.ErrNotFound},
		{"Bad/Name", connection.ErrInvalidName},
	} {
		_, _, err := v.Look(context.Background(), tc.name)
		if !errors.Is(err, tc.want) {
			t.Errorf("Look(%q) = %v, want %v", tc.name, err, tc.want)
		}
	}
	if e.store.Cached() != 0 {
		t.Errorf("%d cache entries after failed looks, want 0", e.store.Cached())
	}
}
