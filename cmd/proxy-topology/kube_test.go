package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

const nodeLabelMain = `driver: proxy
proxy:
  nodeTopology:
    type: zone
    fromRegexp:
    - topologyKey: topology.kubernetes.io/zone
      source: nodeLabel
      label: topology.kubernetes.io/zone
    - topologyKey: rack
      source: nodeLabel
      label: example.com/rack
`

// fakeNodeAPI answers GET /api/v1/nodes/<name> like an API server; the
// real one is exercised by make e2e-kube.
func fakeNodeAPI(t *testing.T, nodes map[string]map[string]string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := strings.CutPrefix(r.URL.Path, "/api/v1/nodes/")
		labels, found := nodes[name]
		w.Header().Set("Content-Type", "application/json")
		if r.Method != http.MethodGet || !ok || !found {
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
				"message": `nodes "` + name + `" not found`, "details": map[string]any{"name": name, "kind": "nodes"}})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Node", "apiVersion": "v1", "metadata": map[string]any{"name": name, "labels": labels}})
	}))
	t.Cleanup(srv.Close)
	return srv
}

func writeKubeconfig(t *testing.T, server string) string {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: ` + server + `
users:
- name: u
  user:
    token: t
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// serveWith serves mainYAML as a node plugin with o; it returns the CSI
// endpoint once serving, or the error Serve stopped with.
func serveWith(t *testing.T, o Options, mainYAML string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	folder := filepath.Join(dir, "connections")
	if err := os.MkdirAll(folder, 0o750); err != nil {
		t.Fatal(err)
	}
	o.Config = filepath.Join(dir, "proxy.yaml")
	writeMainConfig(t, o.Config, mainYAML, folder)
	sock := filepath.Join(testkit.SocketDir(t), "csi.sock")
	o.Endpoint, o.Mode, o.ShutdownTimeout = "unix://"+sock, "node", time.Second
	up := make(chan struct{}, 1)
	o.listening = func(string) { up <- struct{}{} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, o, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	select {
	case <-up:
		t.Cleanup(func() { cancel(); <-done })
		return "unix://" + sock, nil
	case err := <-done:
		cancel()
		return "", err
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatal("Serve neither started nor failed")
		return "", nil
	}
}

func TestServeNodeLabels(t *testing.T) {
	api := fakeNodeAPI(t, map[string]map[string]string{"w1": {"topology.kubernetes.io/zone": "zone1", "example.com/rack": "r7"}})
	endpoint, err := serveWith(t, Options{NodeID: "w1", Kubeconfig: writeKubeconfig(t, api.URL)}, nodeLabelMain)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	info, err := csi.NewNodeClient(conn).NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"topology.kubernetes.io/zone": "zone1", "org.democratic-csi.topology/rack": "r7"}
	if diff := cmp.Diff(want, info.GetAccessibleTopology().GetSegments()); diff != "" {
		t.Errorf("segments (-want +got):\n%s", diff)
	}
}

// TestServeNodeLabelsUnavailable: without a way to read labels the node
// plugin does not start (kubelet would register it without the segments
// for good); the error says why.
func TestServeNodeLabelsUnavailable(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	for name, tc := range map[string]struct {
		kubeconfig string
		want       string
	}{
		"not in a pod": {"", "nodeLabel rules read the Node object: not running in a Kubernetes pod (KUBERNETES_SERVICE_HOST is unset) and no --kubeconfig given"},
		"bad file":     {"/nonexistent/kubeconfig", "kubeconfig /nonexistent/kubeconfig"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := serveWith(t, Options{NodeID: "w1", Kubeconfig: tc.kubeconfig}, nodeLabelMain)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "proxy.nodeTopology") {
				t.Errorf("Serve = %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestServeNoLabelRulesNoAPI: a config without nodeLabel rules never
// touches the API, so it needs neither RBAC nor credentials.
func TestServeNoLabelRulesNoAPI(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := serveWith(t, Options{NodeID: "node-1", Kubeconfig: "/nonexistent/kubeconfig"}, localHostpathMain); err != nil {
		t.Fatalf("Serve: %v", err)
	}
}
