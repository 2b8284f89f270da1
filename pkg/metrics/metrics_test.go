package metrics_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"

	"github.com/democratic-csi/proxy-topology/internal/syncbuf"
	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/internal/testproxy"
	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
	"github.com/democratic-csi/proxy-topology/pkg/logging"
	"github.com/democratic-csi/proxy-topology/pkg/metrics"
	"github.com/democratic-csi/proxy-topology/pkg/nodetopology"
)

var topology = accessible.Options{Prefix: nodetopology.DefaultPrefix, Type: nodetopology.TypeCluster}

// proxy is a pkg/csi Driver on a real unix socket, wired to metrics the way
// serve does it.
type proxy struct {
	folder     string
	m          *metrics.Metrics
	scrape     *httptest.Server
	controller csi.ControllerClient
	identity   csi.IdentityClient
	store      *connection.Store
}

type syncBuffer = syncbuf.Buffer

// startProxy serves a proxy whose store caches connections for
// cacheTimeout; storeOpts edit the store's options before it is made.
func startProxy(t *testing.T, cacheTimeout time.Duration, storeOpts ...func(*connection.Options)) *proxy {
	t.Helper()
	log, err := logging.New(&syncBuffer{}, "json", "debug")
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	tp := testproxy.Start(t, testproxy.Config{
		Log: log,
		Catalogue: func(o *connection.Options) {
			o.CacheTimeout, o.Topology, o.OnLoad = cacheTimeout, topology, m.ConnectionLoaded
			for _, edit := range storeOpts {
				edit(o)
			}
		},
		Observers: []pcsi.Observer{m},
	})
	tp.Pool.SetObserver(m.UpstreamObserver(pcsi.ConnectionFromContext))
	m.WatchCache(tp.Store.Cached)
	m.WatchConnections(tp.Store.List)
	ready := func() error { return nil } // the proxy serves from the start
	m.WatchReady(ready)
	hs := httptest.NewServer(m.Handler(ready))
	t.Cleanup(hs.Close)
	return &proxy{
		folder: tp.Folder, m: m, scrape: hs, store: tp.Store,
		controller: csi.NewControllerClient(tp.Conn), identity: csi.NewIdentityClient(tp.Conn),
	}
}

func (p *proxy) write(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(p.folder, name+".yaml"), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestScrapeAfterScriptedCalls runs a fixed set of calls through the proxy
// and checks every counter they move, by method, connection and code.
func TestScrapeAfterScriptedCalls(t *testing.T) {
	p := startProxy(t, -1) // cache forever: each file version loads once
	base := t.TempDir()
	localYAML := "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: " + base + "\n"
	p.write(t, "local", localYAML)
	p.write(t, "broken", "driver: nope\n")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	for range 2 {
		_, err := p.identity.Probe(ctx, &csi.ProbeRequest{})
		testkit.WantCode(t, err, codes.OK)
	}
	create := func(name string, params map[string]string) (*csi.CreateVolumeResponse, error) {
		return p.controller.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name, Parameters: params, VolumeCapabilities: []*csi.VolumeCapability{testkit.RWO()}})
	}
	vol, err := create("pvc-a", map[string]string{"connection": "local"})
	testkit.WantCode(t, err, codes.OK)
	_, err = create("pvc-b", map[string]string{"connection": "broken"})
	testkit.WantCode(t, err, codes.FailedPrecondition)
	_, err = create("pvc-c", map[string]string{"connection": "typo-in-storageclass"})
	testkit.WantCode(t, err, codes.FailedPrecondition)
	_, err = create("pvc-d", nil)
	testkit.WantCode(t, err, codes.InvalidArgument)

	// A file that does not load fails the listing (a list without its
	// volumes would read as "gone" to the CO; docs/operations.md).
	_, err = p.controller.ListVolumes(ctx, &csi.ListVolumesRequest{})
	testkit.WantCode(t, err, codes.FailedPrecondition)

	// A changed file is reloaded on the next call.
	p.write(t, "local", localYAML+"# edited\n")
	_, err = p.controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: vol.GetVolume().GetVolumeId()})
	testkit.WantCode(t, err, codes.OK)
	_, err = p.controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "not-made-by-the-proxy"})
	testkit.WantCode(t, err, codes.OK)
	_, err = p.controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "v:gone/pvc-x"})
	testkit.WantCode(t, err, codes.FailedPrecondition)

	g := p.m.Registry()
	expect := func(text string, names ...string) {
		t.Helper()
		if err := testutil.GatherAndCompare(g, strings.NewReader(text), names...); err != nil {
			t.Error(err)
		}
	}
	expect(`
# HELP proxy_topology_csi_requests_total CSI calls served, by method, connection ("" when the call names none) and gRPC code.
# TYPE proxy_topology_csi_requests_total counter
proxy_topology_csi_requests_total{code="OK",connection="",method="DeleteVolume"} 1
proxy_topology_csi_requests_total{code="FailedPrecondition",connection="",method="ListVolumes"} 1
proxy_topology_csi_requests_total{code="OK",connection="",method="Probe"} 2
proxy_topology_csi_requests_total{code="InvalidArgument",connection="",method="CreateVolume"} 1
proxy_topology_csi_requests_total{code="FailedPrecondition",connection="(unknown)",method="CreateVolume"} 1
proxy_topology_csi_requests_total{code="FailedPrecondition",connection="(unknown)",method="DeleteVolume"} 1
proxy_topology_csi_requests_total{code="FailedPrecondition",connection="broken",method="CreateVolume"} 1
proxy_topology_csi_requests_total{code="OK",connection="local",method="CreateVolume"} 1
proxy_topology_csi_requests_total{code="OK",connection="local",method="DeleteVolume"} 1
`, "proxy_topology_csi_requests_total")

	// Capabilities are discovered once per upstream client, on the first
	// call that needs them; the edited file reuses the same client.
	endpoint := "local-hostpath:" + base
	expect(`
# HELP proxy_topology_upstream_requests_total Calls to upstream CSI drivers, by connection, endpoint, method and gRPC code; code!="OK" are the errors.
# TYPE proxy_topology_upstream_requests_total counter
proxy_topology_upstream_requests_total{code="OK",connection="local",endpoint="`+endpoint+`",method="ControllerGetCapabilities"} 1
proxy_topology_upstream_requests_total{code="OK",connection="local",endpoint="`+endpoint+`",method="CreateVolume"} 1
proxy_topology_upstream_requests_total{code="OK",connection="local",endpoint="`+endpoint+`",method="DeleteVolume"} 1
`, "proxy_topology_upstream_requests_total")

	// ListVolumes loads every file once (broken fails, and the failure is
	// cached for that file version); the edit reloads local.
	expect(`
# HELP proxy_topology_connection_load_failures_total Loads that failed: the file does not parse or validate, or its upstream cannot be set up.
# TYPE proxy_topology_connection_load_failures_total counter
proxy_topology_connection_load_failures_total{connection="broken"} 1
# HELP proxy_topology_connection_loads_total Connection files read and parsed, successful or not, first loads and reloads.
# TYPE proxy_topology_connection_loads_total counter
proxy_topology_connection_loads_total{connection="broken"} 1
proxy_topology_connection_loads_total{connection="local"} 2
# HELP proxy_topology_connection_reloads_total Loads that replaced a cached connection because its file changed.
# TYPE proxy_topology_connection_reloads_total counter
proxy_topology_connection_reloads_total{connection="local"} 1
# HELP proxy_topology_connections_cached Connections in the cache: loaded, and used within the cache timeout.
# TYPE proxy_topology_connections_cached gauge
proxy_topology_connections_cached 2
# HELP proxy_topology_ready 1 when the config is loaded and the CSI socket is serving (what /readyz and Probe report).
# TYPE proxy_topology_ready gauge
proxy_topology_ready 1
`, "proxy_topology_connection_loads_total", "proxy_topology_connection_reloads_total",
		"proxy_topology_connection_load_failures_total", "proxy_topology_connections_cached", "proxy_topology_ready")

	// One latency observation per call, in the same series as the counters.
	if n := testutil.CollectAndCount(p.m.Registry(), "proxy_topology_csi_request_duration_seconds"); n != 9 {
		t.Errorf("csi_request_duration_seconds has %d series, want 9 (one per method and connection)", n)
	}

	// The same numbers over HTTP, and no volume ID or foreign name in any
	// label.
	body := get(t, p.scrape.URL+"/metrics", http.StatusOK)
	if !strings.Contains(body, `proxy_topology_csi_requests_total{code="OK",connection="local",method="CreateVolume"} 1`) {
		t.Errorf("/metrics lacks the CreateVolume counter:\n%s", body)
	}
	for _, s := range []string{"pvc-", "v:", "typo-in-storageclass", "gone", "not-made-by-the-proxy"} {
		if strings.Contains(body, s) {
			t.Errorf("/metrics contains %q, which must never become a label", s)
		}
	}
}

// TestConnectionLabelBoundedWithoutCache: with cacheTimeoutMinutes 0 every
// call reads the file, and the label set still only holds real files.
func TestConnectionLabelBoundedWithoutCache(t *testing.T) {
	p := startProxy(t, 0)
	p.write(t, "local", "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: "+t.TempDir()+"\n")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 3 {
		_, err := p.controller.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc", Parameters: map[string]string{"connection": "local"}, VolumeCapabilities: []*csi.VolumeCapability{testkit.RWO()}})
		testkit.WantCode(t, err, codes.OK)
		_, err = p.controller.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc", Parameters: map[string]string{"connection": "nope-" + string(rune('a'+i))}, VolumeCapabilities: []*csi.VolumeCapability{testkit.RWO()}})
		testkit.WantCode(t, err, codes.FailedPrecondition)
	}
	err := testutil.GatherAndCompare(p.m.Registry(), strings.NewReader(`
# HELP proxy_topology_connection_loads_total Connection files read and parsed, successful or not, first loads and reloads.
# TYPE proxy_topology_connection_loads_total counter
proxy_topology_connection_loads_total{connection="local"} 3
# HELP proxy_topology_connections_cached Connections in the cache: loaded, and used within the cache timeout.
# TYPE proxy_topology_connections_cached gauge
proxy_topology_connections_cached 0
# HELP proxy_topology_csi_requests_total CSI calls served, by method, connection ("" when the call names none) and gRPC code.
# TYPE proxy_topology_csi_requests_total counter
proxy_topology_csi_requests_total{code="FailedPrecondition",connection="(unknown)",method="CreateVolume"} 3
proxy_topology_csi_requests_total{code="OK",connection="local",method="CreateVolume"} 3
`), "proxy_topology_connection_loads_total", "proxy_topology_connections_cached", "proxy_topology_csi_requests_total")
	if err != nil {
		t.Error(err)
	}
}

// TestConnectionsCachedFallsWhenEntriesExpire: the gauge counts what the
// cache still holds when it is scraped, not what it held at the last call:
// connections unused past the cache timeout drop out of it without any
// call in between.
func TestConnectionsCachedFallsWhenEntriesExpire(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	p := startProxy(t, 10*time.Minute, func(o *connection.Options) { o.Now = clock })
	p.write(t, "local", "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: "+t.TempDir()+"\n")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := p.controller.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc", Parameters: map[string]string{"connection": "local"}, VolumeCapabilities: []*csi.VolumeCapability{testkit.RWO()}})
	testkit.WantCode(t, err, codes.OK)

	cached := func(want string) {
		t.Helper()
		err := testutil.GatherAndCompare(p.m.Registry(), strings.NewReader(`
# HELP proxy_topology_connections_cached Connections in the cache: loaded, and used within the cache timeout.
# TYPE proxy_topology_connections_cached gauge
proxy_topology_connections_cached `+want+"\n"), "proxy_topology_connections_cached")
		if err != nil {
			t.Error(err)
		}
	}
	cached("1")
	mu.Lock()
	now = now.Add(11 * time.Minute)
	mu.Unlock()
	cached("0")
}

func TestNodeTopologyRules(t *testing.T) {
	ev, err := nodetopology.Compile(nodetopology.Config{
		Type: nodetopology.TypeCluster,
		FromRegexp: []nodetopology.Rule{
			{TopologyKey: "zone", Source: nodetopology.SourceEnv, EnvName: "ZONE"},
			{TopologyKey: "zone", Source: nodetopology.SourceNodeName, Regex: "[a-z]+-(zone[0-9])-[0-9]+", Template: "{match:1}"},
			{TopologyKey: "zone", Source: nodetopology.SourceHostname},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	m.SetNodeTopology(ev.Evaluate(nodetopology.Inputs{NodeName: "worker-zone2-07", Hostname: "h1"}))
	err = testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP proxy_topology_node_topology_rule 1 for the status each node topology rule had at start-up (rule="base" is the segment of nodeTopology.type).
# TYPE proxy_topology_node_topology_rule gauge
proxy_topology_node_topology_rule{key="org.democratic-csi.topology/cluster",rule="base",status="matched"} 1
proxy_topology_node_topology_rule{key="org.democratic-csi.topology/zone",rule="0",status="skipped"} 1
proxy_topology_node_topology_rule{key="org.democratic-csi.topology/zone",rule="1",status="matched"} 1
proxy_topology_node_topology_rule{key="org.democratic-csi.topology/zone",rule="2",status="shadowed"} 1
# HELP proxy_topology_node_topology_segments Topology segments this node reports; 0 means NodeGetInfo fails and the node cannot register.
# TYPE proxy_topology_node_topology_segments gauge
proxy_topology_node_topology_segments 2
`), "proxy_topology_node_topology_rule", "proxy_topology_node_topology_segments")
	if err != nil {
		t.Error(err)
	}
	// Controller-only processes evaluate no rules and export neither.
	if n := testutil.CollectAndCount(metrics.New().Registry(), "proxy_topology_node_topology_rule"); n != 0 {
		t.Errorf("a fresh registry has %d node_topology_rule series", n)
	}
}

func TestHealthEndpoints(t *testing.T) {
	m := metrics.New()
	var mu sync.Mutex
	notReady := errors.New("loading config")
	ready := func() error { mu.Lock(); defer mu.Unlock(); return notReady }
	hs := httptest.NewServer(m.Handler(ready))
	defer hs.Close()

	for _, tc := range []struct {
		name     string
		notReady error
		path     string
		code     int
		body     string
	}{
		{"healthz while starting", errors.New("loading config"), "/healthz", 200, "ok\n"},
		{"readyz while starting", errors.New("loading config"), "/readyz", 503, "not ready: loading config\n"},
		{"readyz when serving", nil, "/readyz", 200, "ok\n"},
		{"healthz when serving", nil, "/healthz", 200, "ok\n"},
		{"readyz while stopping", errors.New("shutting down"), "/readyz", 503, "not ready: shutting down\n"},
		{"unknown path", nil, "/nope", 404, "404 page not found\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			notReady = tc.notReady
			mu.Unlock()
			if got := get(t, hs.URL+tc.path, tc.code); got != tc.body {
				t.Errorf("body %q, want %q", got, tc.body)
			}
		})
	}
}

func TestListenAndShutdown(t *testing.T) {
	m := metrics.New()
	m.SetBuildInfo("v1.2.3", "proxy.example.com", "all")
	srv, err := metrics.Listen("127.0.0.1:0", m.Handler(func() error { return nil }), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	body := get(t, "http://"+srv.Addr()+"/metrics", 200)
	if !strings.Contains(body, `proxy_topology_build_info{csi_name="proxy.example.com",mode="all",version="v1.2.3"} 1`) {
		t.Errorf("no build_info in\n%s", body)
	}
	if !strings.Contains(body, "go_goroutines") {
		t.Error("no Go runtime metrics")
	}
	if _, err := metrics.Listen(srv.Addr(), http.NotFoundHandler(), slog.Default()); err == nil || !strings.Contains(err.Error(), "--metrics-address") {
		t.Errorf("second Listen on a taken port: %v", err)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + srv.Addr() + "/healthz"); err == nil {
		t.Error("server still answers after Shutdown")
	}
}

func get(t *testing.T, url string, wantCode int) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != wantCode {
		t.Fatalf("GET %s: %d %s, want %d", url, resp.StatusCode, b, wantCode)
	}
	return string(b)
}
