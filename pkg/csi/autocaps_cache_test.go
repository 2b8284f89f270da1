package csi_test

import (
	"fmt"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/democratic-csi/proxy-topology/pkg/config"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
)

// TestRefreshCachesNoConnection (issue 15, proxy.capabilities: auto over
// many connections): a refresh over 200 connection files leaves only the
// connection a call used in the store's cache (the
// proxy_topology_connections_cached gauge reads Store.Cached), asks each
// of the two distinct upstreams once per round, keeps no upstream client
// open that no cached connection uses, and does not keep the used
// connection from expiring after the cache timeout.
func TestRefreshCachesNoConnection(t *testing.T) {
	a := newFakeUpstream(t, withControllerCaps(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME), withNodeCaps())
	b := newFakeUpstream(t, withControllerCaps(csi.ControllerServiceCapability_RPC_LIST_VOLUMES), withNodeCaps())
	clock := testingclock.NewFakeClock(time.Now()) // the store's clock under the test's control
	const ttl = 10 * time.Minute
	p := startProxyStore(t, func(o *connection.Options) { o.CacheTimeout = ttl; o.Now = clock.Now },
		withPolicy(t, config.Capabilities{}, false))
	store := p.Store
	const n = 200
	for i := range n {
		up := a
		if i%2 == 1 {
			up = b
		}
		p.add(t, fmt.Sprintf("c%03d", i), conn{Endpoint: up.Endpoint})
	}
	// One connection is used by a call: it alone is cached.
	_, release, err := p.Registry.Get(callCtx(t), "c000")
	if err != nil {
		t.Fatal(err)
	}
	release()
	asked := func(f *fakeUpstream) int { return len(f.requests("ControllerGetCapabilities")) }
	baseA, baseB := asked(a), asked(b)
	for round := 1; round <= 2; round++ {
		_, unconfirmed := p.Driver.RefreshCapabilities(callCtx(t))
		if len(unconfirmed) != 0 {
			t.Fatalf("round %d: unconfirmed %v", round, unconfirmed)
		}
		if got := store.Cached(); got != 1 {
			t.Errorf("round %d: %d connections cached after the refresh, want 1 (c000, which a call used)", round, got)
		}
		if ga, gb := asked(a)-baseA, asked(b)-baseB; ga != round || gb != round {
			t.Errorf("round %d: ControllerGetCapabilities asked %d times of a and %d of b, want %d each (once per round)", round, ga, gb, round)
		}
		if got := len(b.requests("GetPluginCapabilities")); got != round {
			t.Errorf("round %d: GetPluginCapabilities asked %d times of b, want %d", round, got, round)
		}
		// b's client was leased for the refresh only; a's stays with c000.
		if got := p.Pool.Len(); got != 1 {
			t.Errorf("round %d: %d upstream clients open after the refresh, want 1 (%v)", round, got, p.Pool.Targets())
		}
	}
	want := []ctrlCap{csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, csi.ControllerServiceCapability_RPC_LIST_VOLUMES}
	if d := diff(want, p.Driver.Capabilities().Controller); d != "" {
		t.Errorf("advertised controller capabilities (-want +got):\n%s", d)
	}

	// Refreshes every 4 minutes do not keep c000 from expiring 10 minutes
	// after its last use, nor bring it back.
	for range 3 {
		clock.Step(4 * time.Minute)
		p.Driver.RefreshCapabilities(callCtx(t))
	}
	if got := store.Cached(); got != 0 {
		t.Errorf("%d connections cached 12 minutes after the last use, want 0", got)
	}
	if got := p.Pool.Len(); got != 0 {
		t.Errorf("%d upstream clients open after c000 expired, want 0 (%v)", got, p.Pool.Targets())
	}
}
