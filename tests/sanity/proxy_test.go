package sanitytest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/democratic-csi/proxy-topology/internal/testbin"
	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/backend"
	"github.com/democratic-csi/proxy-topology/pkg/capability"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
	"github.com/democratic-csi/proxy-topology/pkg/nodetopology"
	"github.com/democratic-csi/proxy-topology/pkg/upstream"
)

// The proxy is checked in front of three upstreams:
//   - proxy-builtin: a built-in local-hostpath connection (in-process);
//   - proxy-csi: a csi connection to a separate `proxy-topology serve`
//     process serving local-hostpath (driver: local-hostpath), over a real
//     unix socket;
//   - proxy-publish: like proxy-builtin with proxy.controllerPublish and a
//     local-hostpath that records attachments, so every ControllerPublish
//     spec runs through the proxy's node-id translation.
//
// Every proxy target advertises the proxy's full capability list minus
// MODIFY_VOLUME, hidden through proxy.capabilities exactly as an admin
// would hide it for a backend that cannot modify volumes (local-hostpath
// has nothing to modify). The proxy always stages (emulating it for
// upstreams that do not), so the NodeStage specs run on every target.
// Specs csi-test itself skips, for capabilities no target advertises:
//   - GroupController / VolumeGroupSnapshots: no GROUP_CONTROLLER_SERVICE;
//   - CreateSnapshot with accessibility requirements: no
//     SNAPSHOT_ACCESSIBILITY_CONSTRAINTS;
//   - ModifyVolume and "volume attribute class" specs: MODIFY_VOLUME hidden;
//   - "ListVolumes pagination should detect volumes added between pages":
//     pending (XIt) in csi-test itself;
//   - without proxy.controllerPublish: ControllerPublish/Unpublish,
//     "volume lifecycle" and the attach-limit spec.

const sanityConnection = "sanity"

func TestSanityProxyBuiltin(t *testing.T) {
	t.Parallel()
	cfg := sanity.NewTestConfig()
	if inSanityChild("proxy-builtin") {
		dir := sanityDir(t)
		cfg = proxyConfig(t, dir, false, fmt.Sprintf(
			"driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\n  stage: true\n", filepath.Join(dir, "base")))
	}
	runSanity(t, "proxy-builtin", cfg)
}

func TestSanityProxyCSI(t *testing.T) {
	t.Parallel()
	cfg := sanity.NewTestConfig()
	if inSanityChild("proxy-csi") {
		dir := sanityDir(t)
		sock := startStandalone(t, dir)
		cfg = proxyConfig(t, dir, false, fmt.Sprintf(
			"driver: csi\ncsi:\n  endpoint: unix://%s\n  timeout: 60s\n  secrets:\n    from-connection: sanity-secret\n", sock))
	}
	runSanity(t, "proxy-csi", cfg)
}

func TestSanityProxyPublish(t *testing.T) {
	t.Parallel()
	cfg := sanity.NewTestConfig()
	if inSanityChild("proxy-publish") {
		dir := sanityDir(t)
		cfg = proxyConfig(t, dir, true, fmt.Sprintf(
			"driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\n  controllerPublish: true\nproxy:\n  perDriver:\n    nodeId:\n      template: \"iqn.2000-01.com.example:{nodeName}\"\n",
			filepath.Join(dir, "base")))
	}
	runSanity(t, "proxy-publish", cfg)
}

// sanityDir is a temp dir whose mounts are detached when the test ends.
func sanityDir(t *testing.T) string {
	t.Helper()
	testbin.RequireRoot(t, "proxy sanity needs root: the upstream bind-mounts volumes")
	dir := t.TempDir()
	t.Cleanup(func() { unmountBelow(t, dir) })
	return dir
}

// proxyConfig serves the proxy in this process with one connection, whose
// file content is given, and returns the sanity config pointing at it.
func proxyConfig(t *testing.T, dir string, controllerPublish bool, connectionFile string) sanity.TestConfig {
	t.Helper()
	folder := filepath.Join(dir, "connections")
	if err := os.MkdirAll(folder, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(folder, sanityConnection+".yaml"), []byte(connectionFile), 0o640); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	pool := upstream.NewPool(log)
	t.Cleanup(pool.Close)
	topo := accessible.Options{Prefix: nodetopology.DefaultPrefix, Type: nodetopology.TypeCluster}
	store := connection.NewStore(connection.Options{Folder: folder, CacheTimeout: time.Hour, Topology: topo, Log: log})
	registry := backend.New(backend.Options{
		Catalogue: store, Pool: pool, NodeID: "sanity-node", DriverName: "proxy.sanity.proxy-topology", Version: "sanity", Log: log,
	})
	ctrl := []string{
		"CREATE_DELETE_VOLUME", "CREATE_DELETE_SNAPSHOT", "LIST_SNAPSHOTS", "LIST_VOLUMES", "CLONE_VOLUME",
		"EXPAND_VOLUME", "GET_CAPACITY", "GET_VOLUME", "GET_SNAPSHOT", "GET_VOLUME_HEALTH",
		"LIST_VOLUME_HEALTH", "SINGLE_NODE_MULTI_WRITER",
	}
	if controllerPublish {
		ctrl = append(ctrl, "PUBLISH_UNPUBLISH_VOLUME")
	}
	caps, err := capability.Resolve(ctrl, nil, controllerPublish)
	if err != nil {
		t.Fatal(err)
	}
	d, err := pcsi.New(pcsi.Options{
		Name: "proxy.sanity.proxy-topology", Version: "sanity", NodeID: "sanity-node",
		Connections: registry, DefaultConnection: sanityConnection, Topology: topo,
		NodeSegments: map[string]string{nodetopology.DefaultPrefix + "/cluster": "local"},
		Capabilities: caps, Log: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	d.SetReady(true)
	lis, err := pcsi.Listen("unix://" + filepath.Join(dir, "proxy", "csi.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := pcsi.NewServer(d, log)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)

	cfg := sanity.NewTestConfig()
	cfg.Address = "unix://" + filepath.Join(dir, "proxy", "csi.sock")
	cfg.TargetPath = filepath.Join(dir, "target")
	cfg.StagingPath = filepath.Join(dir, "staging")
	cfg.TestVolumeSize = 64 << 20
	cfg.TestVolumeExpandSize = 128 << 20
	cfg.TestVolumeParameters = map[string]string{pcsi.ConnectionParameter: sanityConnection}
	cfg.IDGen = proxyIDs{}
	return cfg
}

// proxyIDs makes IDs that route to the sanity connection and then name
// nothing upstream, so the not-found specs test the whole path.
type proxyIDs struct{ sanity.DefaultIDGenerator }

func randomHex() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (proxyIDs) GenerateUniqueValidVolumeID() string {
	return "v:" + sanityConnection + "/vol-" + randomHex()
}

// startStandalone builds the binary and runs `serve` with main config
// driver: local-hostpath, a real separate upstream process; it returns the
// socket path.
func startStandalone(t *testing.T, dir string) string {
	t.Helper()
	// Without -race: the proxy in front of it is what this target tests.
	bin, cleanup, err := testbin.Build("../..", false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	cfgFile := filepath.Join(dir, "upstream.yaml")
	if err := os.WriteFile(cfgFile, []byte(fmt.Sprintf("driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\n  stage: true\n",
		filepath.Join(dir, "upstream-base"))), 0o640); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "upstream", "csi.sock")
	logFile, err := os.Create(filepath.Join(dir, "upstream.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--config", cfgFile, "--csi-endpoint", "unix://"+sock, "--node-id", "sanity-node", "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopProcess(cmd)
		logFile.Close()
		if t.Failed() {
			out, _ := os.ReadFile(logFile.Name())
			t.Logf("upstream log:\n%s", out)
		}
	})
	waitProbe(t, sock)
	return sock
}

// waitProbe waits up to 30 s for a CSI server to answer Probe ready (an
// absent ready counts as ready, as the CSI spec says): a proxy is not
// ready before it has asked its upstreams what to advertise.
func waitProbe(t *testing.T, sock string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := csi.NewIdentityClient(conn)
	for {
		if _, err := os.Stat(sock); err == nil {
			if resp, err := client.Probe(ctx, &csi.ProbeRequest{}); err == nil && (resp.GetReady() == nil || resp.GetReady().GetValue()) {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("CSI server at %s did not answer Probe ready within 30s", sock)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
