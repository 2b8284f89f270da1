package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/democratic-csi/proxy-topology/internal/syncbuf"
	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

// syncBuffer collects the log of an in-process Serve.
type syncBuffer = syncbuf.Buffer

// served is a proxy started with Serve from serve.go, exactly as the
// binary runs it, on a temporary socket with a temporary config.
type served struct {
	Endpoint   string
	Metrics    string // http://127.0.0.1:port
	Folder     string
	Logs       *syncBuffer
	stop       func()
	stopped    chan error
	stopOnce   sync.Once
	socketPath string
}

// startServe writes mainYAML (with proxy.configFolder set) and the
// connection files, and serves them with a JSON logger at debug level, in
// mode all as node node-1.
func startServe(t *testing.T, mainYAML string, connections map[string]string) *served {
	t.Helper()
	return startServeWith(t, mainYAML, connections, nil)
}

// startServeWith is startServe with edit, if not nil, applied to the
// Options before they are validated.
func startServeWith(t *testing.T, mainYAML string, connections map[string]string, edit func(*Options)) *served {
	t.Helper()
	dir := t.TempDir()
	folder := filepath.Join(dir, "connections")
	if err := os.MkdirAll(folder, 0o750); err != nil {
		t.Fatal(err)
	}
	for name, content := range connections {
		if err := os.WriteFile(filepath.Join(folder, name+".yaml"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(dir, "proxy.yaml")
	writeMainConfig(t, cfg, mainYAML, folder)
	sock := filepath.Join(testkit.SocketDir(t), "csi", "csi.sock")
	logs := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	addr := make(chan string, 1)
	o := Options{
		Config: cfg, Endpoint: "unix://" + sock, NodeID: "node-1", Mode: "all",
		ShutdownTimeout: 5 * time.Second, MetricsAddress: "127.0.0.1:0",
		listening: func(a string) { addr <- a },
	}
	if edit != nil {
		edit(&o)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{Endpoint: "unix://" + sock, Folder: folder, Logs: logs, stop: cancel, stopped: make(chan error, 1), socketPath: sock}
	go func() { s.stopped <- Serve(ctx, o, log) }()
	select {
	case a := <-addr:
		s.Metrics = "http://" + a
	case err := <-s.stopped:
		t.Fatalf("Serve: %v\n%s", err, logs)
	case <-time.After(20 * time.Second):
		t.Fatalf("Serve did not start\n%s", logs)
	}
	t.Cleanup(s.shutdown)
	return s
}

// shutdown cancels Serve's context and waits for it to return.
func (s *served) shutdown() {
	s.stopOnce.Do(func() {
		s.stop()
		select {
		case <-s.stopped:
		case <-time.After(20 * time.Second):
			panic("Serve did not stop")
		}
	})
}

// httpGet returns the status code and body.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// runCSI runs `proxy-topology csi --endpoint … args…`.
func runCSI(t *testing.T, endpoint string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(append([]string{"csi", "--endpoint", endpoint}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

const localHostpathMain = `driver: proxy
proxy:
  controllerPublish: true
  nodeTopology:
    type: cluster
    fromRegexp:
    - topologyKey: zone
      source: nodeName
      regex: "node-([0-9]+)"
      template: "zone{match:1}"
`

func TestHealthThroughServe(t *testing.T) {
	s := startServe(t, localHostpathMain, map[string]string{
		"local": "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: " + t.TempDir() + "\n",
	})
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := httpGet(t, s.Metrics+path); code != 200 || body != "ok\n" {
			t.Errorf("%s: %d %q", path, code, body)
		}
	}
	_, body := httpGet(t, s.Metrics+"/metrics")
	for _, want := range []string{
		"proxy_topology_ready 1",
		`proxy_topology_build_info{csi_name="org.democratic-csi.proxy-topology",mode="all",version="` + buildVersion() + `"} 1`,
		`proxy_topology_node_topology_rule{key="org.democratic-csi.topology/zone",rule="0",status="matched"} 1`,
		// cluster, zone, and the node key: the example's local connection
		// is node-local (SPEC §12).
		"proxy_topology_node_topology_segments 3",
		// The start-up capability refresh (proxy.capabilities: auto)
		// asks the connection's upstream without caching it: only calls
		// fill the cache.
		"proxy_topology_connections_cached 0",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// After shutdown the metrics server is gone with the socket.
	s.shutdown()
	if _, err := http.Get(s.Metrics + "/healthz"); err == nil {
		t.Error("/healthz still answers after Serve returned")
	}
}

func TestServeFailsWhenMetricsAddressIsTaken(t *testing.T) {
	s := startServe(t, localHostpathMain, nil)
	o := Options{Config: "/nonexistent.yaml", Endpoint: "unix:///nonexistent/csi.sock", NodeID: "n", Mode: "all",
		MetricsAddress: strings.TrimPrefix(s.Metrics, "http://")}
	err := Serve(context.Background(), o, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "--metrics-address") {
		t.Errorf("Serve on a taken metrics port: %v", err)
	}
}

func TestMetricsAddressValidation(t *testing.T) {
	for addr, ok := range map[string]bool{"": true, ":9808": true, "127.0.0.1:0": true, "[::1]:9808": true, "9808": false, "http://x:1": false} {
		o := Options{Mode: "all", NodeID: "n", MetricsAddress: addr}
		if err := o.Validate(); (err == nil) != ok {
			t.Errorf("--metrics-address %q: %v", addr, err)
		}
	}
}

// The built-in default's connection files are edited as YAML data: the
// base path changes, comments and everything else stay.
func TestWithShareBasePath(t *testing.T) {
	in := "# a comment\ndriver: local-hostpath\nlocal-hostpath:\n  shareBasePath: /var/lib/x # where\n  stage: true\n"
	out, ok, err := withShareBasePath([]byte(in), "/tmp/run/data/local")
	if err != nil || !ok {
		t.Fatalf("withShareBasePath = %v, %v", ok, err)
	}
	want := "# a comment\ndriver: local-hostpath\nlocal-hostpath:\n  shareBasePath: /tmp/run/data/local # where\n  stage: true\n"
	if string(out) != want {
		t.Errorf("got:\n%s\nwant:\n%s", out, want)
	}
	if _, ok, err := withShareBasePath([]byte("driver: csi\ncsi:\n  endpoint: unix:///x\n"), "/y"); ok || err != nil {
		t.Errorf("a csi connection: ok=%v err=%v, want it left out", ok, err)
	}
	if _, _, err := withShareBasePath([]byte("- a\n"), "/y"); err == nil {
		t.Error("a YAML list: no error")
	}
}
