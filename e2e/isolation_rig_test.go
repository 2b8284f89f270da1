package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/backend"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
	"github.com/democratic-csi/proxy-topology/pkg/upstream"
)

// isoRig is the isolation suite's set-up: a proxy served in this process
// (so the test can count its pool entries, goroutines and open files) in
// front of upstream processes and an in-process upstream:
//
//	h-csi-0..4     csi -> process "iso-up" (all five share one client)
//	h-local-0..4   local-hostpath in the proxy, one base path each
//	f-edit         edited 1,000 times (local-hostpath stage true/false, csi)
//	f-hang         csi -> process "iso-hang", csi.timeout 300ms (SIGSTOPped)
//	f-kill         csi -> process "iso-kill" (killed and restarted)
//	f-echo         csi -> an in-process upstream echoing its next_token
//	f-mount        local-hostpath on a FUSE mount whose lookups block
//
// The h-* connections are the healthy ones the load runs on; each holds one
// volume published (a real bind mount) for NodeGetVolumeStats.
type isoRig struct {
	dir, connDir string
	bases        map[string]string // connection -> base path of its volumes
	procs        map[string]*process
	specs        map[string]processSpec
	echo         *echoUpstream

	pool   *upstream.Pool
	store  *connection.Store
	server *grpc.Server
	conn   *grpc.ClientConn
	ctrl   csi.ControllerClient
	node   csi.NodeClient

	published map[string]publishedVolume // healthy connection -> its volume
}

type publishedVolume struct{ id, target string }

// healthy are the connections the load runs on.
var healthy = func() []string {
	var out []string
	for i := range 5 {
		out = append(out, fmt.Sprintf("h-csi-%d", i), fmt.Sprintf("h-local-%d", i))
	}
	sort.Strings(out)
	return out
}()

const (
	isoHangTimeout  = 300 * time.Millisecond
	isoMountTimeout = time.Second
)

func startIsoRig(t *testing.T) *isoRig {
	t.Helper()
	dir := newTestDir(t)
	r := &isoRig{
		dir: dir, connDir: filepath.Join(dir, "connections"),
		bases: map[string]string{}, procs: map[string]*process{}, specs: map[string]processSpec{},
		published: map[string]publishedVolume{},
	}
	for _, name := range []string{"iso-up", "iso-hang", "iso-kill"} {
		base := filepath.Join(dir, "storage", name)
		r.bases[name] = base
		cfg := filepath.Join(dir, "config", name+".yaml")
		testkit.WriteFile(t, cfg, upstreamConfig(base, false), 0o640)
		r.specs[name] = processSpec{name: name, mode: "all", nodeID: "node-1", config: cfg}
		r.procs[name] = launch(t, dir, r.specs[name])
	}
	r.echo = startEchoUpstream(t, filepath.Join(dir, "sock", "echo", "csi.sock"))

	for i := range 5 {
		r.write(t, fmt.Sprintf("h-csi-%d", i), "driver: csi\ncsi:\n  endpoint: "+r.endpoint("iso-up")+"\n")
		name := fmt.Sprintf("h-local-%d", i)
		r.bases[name] = filepath.Join(dir, "storage", name)
		r.write(t, name, fmt.Sprintf("driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\n", r.bases[name]))
	}
	r.bases["f-edit"] = filepath.Join(dir, "storage", "f-edit")
	r.write(t, "f-edit", r.editVersion(0))
	r.write(t, "f-hang", fmt.Sprintf("driver: csi\ncsi:\n  endpoint: %s\n  timeout: %s\n", r.endpoint("iso-hang"), isoHangTimeout))
	r.write(t, "f-kill", "driver: csi\ncsi:\n  endpoint: "+r.endpoint("iso-kill")+"\n")
	r.write(t, "f-echo", "driver: csi\ncsi:\n  endpoint: "+r.echo.endpoint+"\n")

	// The proxy, as serve wires it, with the production cache timeout.
	logFile, err := os.Create(filepath.Join(dir, "logs", "iso-proxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logFile.Close() })
	log := slog.New(slog.NewJSONHandler(logFile, &slog.HandlerOptions{Level: slog.LevelWarn}))
	topo := accessible.Options{Prefix: prefix, Type: "cluster"}
	r.pool = upstream.NewPool(log)
	r.store = connection.NewStore(connection.Options{Folder: r.connDir, CacheTimeout: time.Hour, Topology: topo, Log: log})
	registry := backend.New(backend.Options{
		Catalogue: r.store, Pool: r.pool, NodeID: "node-1", DriverName: "org.example.isolation", Version: "test", Log: log,
	})
	d, err := pcsi.New(pcsi.Options{Name: "org.example.isolation", Version: "test", NodeID: "node-1",
		Connections: registry, Topology: topo, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	d.SetReady(true)
	r.server = pcsi.NewServer(d, log)
	sock := filepath.Join(dir, "sock", "iso-proxy", "csi.sock")
	if err := os.MkdirAll(filepath.Dir(sock), 0o750); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = r.server.Serve(lis) }()
	r.conn, err = grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	r.ctrl, r.node = csi.NewControllerClient(r.conn), csi.NewNodeClient(r.conn)
	// Safety net if the test fails early; shutdown does it in order.
	t.Cleanup(func() { r.shutdown(); <-served })
	for _, p := range r.procs {
		p.waitReady(t)
	}
	return r
}

// shutdown stops the in-process proxy and upstream, releasing every client.
func (r *isoRig) shutdown() {
	r.conn.Close()
	r.server.Stop()
	r.store.Close()
	r.pool.Close()
	r.echo.stop()
}

func (r *isoRig) endpoint(proc string) string {
	return "unix://" + filepath.Join(r.dir, "sock", proc, "csi.sock")
}

// write replaces <name>.yaml by a rename, as editors and Kubernetes do, so
// the proxy never reads half a file.
func (r *isoRig) write(t *testing.T, name, content string) {
	t.Helper()
	testkit.ReplaceFile(t, filepath.Join(r.connDir, name+".yaml"), content, 0o640)
}

// editVersion is the content of f-edit's version i. Every version offers
// its own zone e<i>, so GetCapacity for that zone is non-zero only when
// version i serves the call. Most versions are csi (to iso-up); one in ten
// is local-hostpath with stage true, one in ten the same base path with
// stage false, so the built-in driver is replaced 200 times.
func (r *isoRig) editVersion(i int) string {
	topology := fmt.Sprintf("proxy:\n  perDriver:\n    topology:\n    - requirements:\n        zone: e%d\n", i)
	switch i % 10 {
	case 0, 5:
		return fmt.Sprintf("driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\n  stage: %t\n%s", r.bases["f-edit"], i%10 == 0, topology)
	}
	return "driver: csi\ncsi:\n  endpoint: " + r.endpoint("iso-up") + "\n" + topology
}

// wantEdit checks that version i of f-edit serves the next call: its zone
// has capacity, and its stage setting is the one in effect.
func (r *isoRig) wantEdit(ctx context.Context, i int) error {
	resp, err := r.ctrl.GetCapacity(ctx, &csi.GetCapacityRequest{
		Parameters:         map[string]string{"connection": "f-edit"},
		AccessibleTopology: &csi.Topology{Segments: map[string]string{prefix + "/zone": "e" + strconv.Itoa(i)}},
	})
	if err != nil {
		return fmt.Errorf("edit %d: GetCapacity: %w", i, err)
	}
	if resp.GetAvailableCapacity() == 0 {
		return fmt.Errorf("edit %d: the next call was served by an older version (no capacity in zone e%d)", i, i)
	}
	if i%10 != 0 && i%10 != 5 {
		return nil
	}
	// Staging a volume that does not exist: a driver that stages looks
	// for it (NOT_FOUND); for one that does not, the proxy has nothing to
	// do (OK).
	_, err = r.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
		VolumeId: "v:f-edit/no-such-volume", StagingTargetPath: filepath.Join(r.dir, "staging-none"),
		VolumeCapability: mountCapability(),
	})
	stages := i%10 == 0
	if stages != (err != nil) {
		return fmt.Errorf("edit %d (stage: %t): NodeStageVolume of a missing volume: %v", i, stages, err)
	}
	return nil
}

// publish creates and publishes one volume on each healthy connection.
func (r *isoRig) publish(t *testing.T) {
	t.Helper()
	for _, conn := range healthy {
		resp, err := r.ctrl.CreateVolume(callCtx(t), createRequest("pub-"+conn, conn, nil))
		if err != nil {
			t.Fatalf("%s: CreateVolume: %v", conn, err)
		}
		target := filepath.Join(r.dir, "kubelet", conn, "mount")
		if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
			t.Fatal(err)
		}
		id := resp.GetVolume().GetVolumeId()
		if _, err := r.node.NodePublishVolume(callCtx(t), &csi.NodePublishVolumeRequest{
			VolumeId: id, TargetPath: target, VolumeCapability: mountCapability(),
		}); err != nil {
			t.Fatalf("%s: NodePublishVolume: %v", conn, err)
		}
		r.published[conn] = publishedVolume{id: id, target: target}
	}
}

// unpublish undoes publish.
func (r *isoRig) unpublish(t *testing.T) {
	t.Helper()
	for conn, v := range r.published {
		if _, err := r.node.NodeUnpublishVolume(callCtx(t), &csi.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: v.target}); err != nil {
			t.Errorf("%s: NodeUnpublishVolume: %v", conn, err)
		}
		if _, err := r.ctrl.DeleteVolume(callCtx(t), &csi.DeleteVolumeRequest{VolumeId: v.id}); err != nil {
			t.Errorf("%s: DeleteVolume: %v", conn, err)
		}
	}
}

// restart starts a killed upstream again on the same socket, keeping the
// killed one's log for its race scan. It runs at the lowest CPU priority:
// a race-instrumented binary starting takes a CPU for about a second, and
// on a two-CPU machine that would show in the healthy connections'
// latency as the cost of a process start, not of the proxy.
func (r *isoRig) restart(t *testing.T, name string) {
	t.Helper()
	old := r.procs[name]
	killed := old.logPath + ".killed"
	if err := os.Rename(old.logPath, killed); err != nil {
		t.Fatal(err)
	}
	old.logPath = killed
	p := launch(t, r.dir, r.specs[name])
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, p.cmd.Process.Pid, 19); err != nil {
		t.Logf("renice %s: %v", name, err)
	}
	p.waitReady(t)
	r.procs[name] = p
}

// freeze stops proc with SIGSTOP and waits until the kernel has stopped
// it, so no call sent after it returns is answered before SIGCONT.
func (r *isoRig) freeze(t *testing.T, proc string) {
	t.Helper()
	p := r.procs[proc]
	p.signal(t, syscall.SIGSTOP)
	stat := fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid)
	deadline := time.Now().Add(5 * time.Second)
	for {
		data, err := os.ReadFile(stat)
		if err != nil {
			t.Fatal(err)
		}
		// pid (comm) state ...: the state follows the last ')'.
		if i := strings.LastIndexByte(string(data), ')'); i > 0 && strings.HasPrefix(string(data[i+1:]), " T") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not stopped 5s after SIGSTOP: %s", proc, data)
		}
		time.Sleep(time.Millisecond)
	}
}

// wantPool checks that the pool holds exactly one client per upstream of a
// live connection.
func (r *isoRig) wantPool(t *testing.T, want []string) {
	t.Helper()
	slices.Sort(want)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := r.pool.Targets()
		slices.Sort(got)
		if slices.Equal(got, want) {
			t.Logf("pool: %d entries, one per upstream of a live connection", len(got))
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("pool holds %d entries %v, want %d: %v", len(got), got, len(want), want)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// echoUpstream is an upstream whose listings never end: every page's
// next_token is the token it was given. It counts its listing calls.
type echoUpstream struct {
	csi.UnimplementedControllerServer
	endpoint string
	srv      *grpc.Server
	done     chan struct{}
	calls    atomic.Int64
	once     sync.Once
}

func startEchoUpstream(t *testing.T, sock string) *echoUpstream {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(sock), 0o750); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	e := &echoUpstream{endpoint: "unix://" + sock, srv: grpc.NewServer(), done: make(chan struct{})}
	csi.RegisterControllerServer(e.srv, e)
	go func() { defer close(e.done); _ = e.srv.Serve(lis) }()
	t.Cleanup(e.stop)
	return e
}

func (e *echoUpstream) stop() {
	e.once.Do(func() { e.srv.Stop(); <-e.done })
}

func (e *echoUpstream) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	resp := &csi.ControllerGetCapabilitiesResponse{}
	for _, c := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES, csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY,
	} {
		resp.Capabilities = append(resp.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: c}}})
	}
	return resp, nil
}

func (e *echoUpstream) token(tok string) string {
	e.calls.Add(1)
	if tok == "" {
		return "echo-1"
	}
	return tok
}

func (e *echoUpstream) ListVolumes(_ context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	next := e.token(req.GetStartingToken())
	return &csi.ListVolumesResponse{NextToken: next, Entries: []*csi.ListVolumesResponse_Entry{{Volume: &csi.Volume{VolumeId: "vol-" + next}}}}, nil
}

func (e *echoUpstream) ListSnapshots(_ context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	next := e.token(req.GetStartingToken())
	return &csi.ListSnapshotsResponse{NextToken: next, Entries: []*csi.ListSnapshotsResponse_Entry{{Snapshot: &csi.Snapshot{SnapshotId: "snap-" + next, SourceVolumeId: "vol-1"}}}}, nil
}

func (e *echoUpstream) GetCapacity(context.Context, *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	return &csi.GetCapacityResponse{AvailableCapacity: 1 << 30}, nil
}
