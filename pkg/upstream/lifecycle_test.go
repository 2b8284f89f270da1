package upstream

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
)

// leaseCSI leases the client of endpoint for the connection "test"; the
// lease is released when the test ends.
func leaseCSI(t *testing.T, p *Pool, endpoint string) *Client {
	t.Helper()
	l, err := p.CSI(context.Background(), "test", endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Release)
	return l.Client()
}

// closedWithin reports whether c's channel shuts down (a built-in
// driver's client: closes) within d.
func closedWithin(c *Client, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if c.closed.Load() || (c.conn != nil && c.conn.GetState() == connectivity.Shutdown) {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// Leases on one endpoint share a client; it closes with the last lease,
// and the pool forgets it (the defect: entries were never released, 220 of
// them after a series of edits).
func TestLeasesShareAndRelease(t *testing.T) {
	p := quietPool(t)
	ep := "unix://" + filepath.Join(t.TempDir(), "up.sock")
	a, err := p.CSI(context.Background(), "a", ep)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.CSI(context.Background(), "b", ep)
	if err != nil {
		t.Fatal(err)
	}
	if a.Client() != b.Client() || p.Len() != 1 {
		t.Fatalf("two leases on one endpoint: clients %p and %p, %d pool entries; want one shared client", a.Client(), b.Client(), p.Len())
	}
	a.Release()
	a.Release() // a second release of one lease changes nothing
	if p.Len() != 1 || closedWithin(b.Client(), 50*time.Millisecond) {
		t.Fatal("the client closed while a lease was still held")
	}
	b.Release()
	if p.Len() != 0 {
		t.Errorf("%d pool entries after every lease was released, want 0", p.Len())
	}
	if !closedWithin(b.Client(), 5*time.Second) {
		t.Error("the client was not closed after its last lease was released")
	}

	// 200 connections coming and going leave nothing behind.
	for i := range 200 {
		l, err := p.CSI(context.Background(), "edited", ep+strings.Repeat("x", i%7))
		if err != nil {
			t.Fatal(err)
		}
		l.Release()
	}
	if p.Len() != 0 {
		t.Errorf("%d pool entries after 200 leases taken and released, want 0", p.Len())
	}
}

// blockingServer blocks CreateVolume until release is closed.
type blockingServer struct {
	csi.UnimplementedControllerServer
	started chan struct{}
	release chan struct{}
}

func (s *blockingServer) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	s.started <- struct{}{}
	select {
	case <-s.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: req.GetName()}}, nil
}

// A call in flight when its client's last lease is released finishes on
// that client; the client closes after it, and refuses later calls.
func TestReleaseWaitsForCallsInFlight(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "up.sock")
	srv := &blockingServer{started: make(chan struct{}, 1), release: make(chan struct{})}
	testkit.ServeUnix(t, sock, func(s *grpc.Server) { csi.RegisterControllerServer(s, srv) })

	p := quietPool(t)
	lease, err := p.CSI(context.Background(), "a", "unix://"+sock)
	if err != nil {
		t.Fatal(err)
	}
	c := lease.Client()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := c.Controller.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "v"})
		done <- err
	}()
	<-srv.started
	lease.Release()
	if closedWithin(c, 100*time.Millisecond) {
		t.Fatal("the client closed with a call in flight")
	}
	close(srv.release)
	if err := <-done; err != nil {
		t.Errorf("the call in flight failed: %v", err)
	}
	if !closedWithin(c, 5*time.Second) {
		t.Error("the client did not close once its call ended")
	}
	if _, err := c.Controller.CreateVolume(context.Background(), &csi.CreateVolumeRequest{Name: "w"}); err == nil || !strings.Contains(err.Error(), "released") {
		t.Errorf("a call on a released client: %v, want it refused", err)
	}
}

// Building a client for one key never blocks another key: the defect was
// an 813ms stall of an unrelated csi connection while a built-in driver was
// made under the pool's lock, unbounded when its base path hung. Waiters on
// the slow key share its one build and give up at their own deadline; a
// build no one waits for any more closes what it made.
func TestBuildBlocksNoOtherKey(t *testing.T) {
	p := quietPool(t)
	unblock := make(chan struct{})
	var builds sync.WaitGroup
	builds.Add(1)
	slowBuilds := 0
	var mu sync.Mutex
	slow := func() (*Client, error) {
		mu.Lock()
		slowBuilds++
		mu.Unlock()
		builds.Done()
		<-unblock
		c := newClient("slow")
		conn, err := grpc.NewClient("passthrough:///slow", grpc.WithTransportCredentials(insecureCreds()))
		if err != nil {
			return nil, err
		}
		c.attach(conn)
		return c, nil
	}
	waiters := make(chan error, 3)
	for range 3 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err := p.acquire(ctx, "slow", "hung", nil, slow)
			waiters <- err
		}()
	}
	builds.Wait()

	start := time.Now()
	other := leaseCSI(t, p, "unix://"+filepath.Join(t.TempDir(), "other.sock"))
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("leasing another endpoint took %v while a build hung", d)
	}
	if other == nil {
		t.Fatal("no client")
	}
	for range 3 {
		if err := <-waiters; !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "slow is not ready") {
			t.Errorf("waiter on a hung build: %v, want DeadlineExceeded naming it", err)
		}
	}
	mu.Lock()
	if slowBuilds != 1 {
		t.Errorf("%d builds of one key, want 1 shared", slowBuilds)
	}
	mu.Unlock()
	close(unblock)
	deadline := time.Now().Add(5 * time.Second)
	for p.Len() != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := p.Targets(); len(got) != 1 || !strings.HasSuffix(got[0], "other.sock") {
		t.Errorf("pool holds %v once the orphaned build ended, want only the other endpoint", got)
	}
}

// A connection whose file changes its built-in driver's settings (same base
// path) gets a new driver: the defect kept the old one until a restart.
// Another connection may not use that base path with other settings.
func TestLocalSettingsChangeGetsNewDriver(t *testing.T) {
	p := quietPool(t)
	base := t.TempDir()
	opts := hostpath.Options{DriverName: "test.example.com", NodeID: "n", BasePath: base, Stage: true,
		Logger: slog.New(slog.DiscardHandler)}
	staged, err := p.Local(context.Background(), "a", opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.Stage = false
	if _, err := p.Local(context.Background(), "b", opts); err == nil || !strings.Contains(err.Error(), `already served with stage=true controllerPublish=false for connection "a"`) {
		t.Errorf("another connection on the base path with other settings: %v, want refused", err)
	}
	plain, err := p.Local(context.Background(), "a", opts)
	if err != nil {
		t.Fatalf("the same connection with new settings: %v", err)
	}
	if plain.Client() == staged.Client() || plain.Client().local.opts.Stage {
		t.Fatal("new settings reuse the old driver")
	}
	if n := claims(t, base); n != 2 {
		t.Errorf("%d drivers hold the base path, want 2 (old and new)", n)
	}
	staged.Release()
	if !closedWithin(staged.Client(), 5*time.Second) {
		t.Fatal("the old driver's client did not close")
	}
	deadline := time.Now().Add(5 * time.Second)
	for claims(t, base) != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := claims(t, base); n != 1 {
		t.Errorf("%d drivers hold the base path after the old one was released, want 1", n)
	}
	plain.Release()
	deadline = time.Now().Add(5 * time.Second)
	for claims(t, base) != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := claims(t, base); n != 0 || p.Len() != 0 {
		t.Errorf("%d drivers and %d pool entries left after every lease was released", n, p.Len())
	}
}

// claims counts the running drivers on a base path: each holds a lock file
// in tmp/ until it is closed.
func claims(t *testing.T, base string) int {
	t.Helper()
	locks, err := filepath.Glob(filepath.Join(base, "tmp", "*.lock"))
	if err != nil {
		t.Fatal(err)
	}
	return len(locks)
}

// capsV serves ControllerGetCapabilities with a given set.
type capsV struct {
	csi.UnimplementedControllerServer
	snapshots bool
}

func (s capsV) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	types := []csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME}
	if s.snapshots {
		types = append(types, csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT)
	}
	resp := &csi.ControllerGetCapabilitiesResponse{}
	for _, x := range types {
		resp.Capabilities = append(resp.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: x}}})
	}
	return resp, nil
}

// An upstream upgraded in place (restarted on the same socket, now with
// snapshots) is asked again: the defect cached its capabilities for the
// endpoint until the proxy restarted.
func TestCapabilitiesRediscoveredAfterReconnect(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "up.sock")
	serve := func(snapshots bool) *grpc.Server {
		_ = os.Remove(sock)
		return testkit.ServeUnix(t, sock, func(s *grpc.Server) { csi.RegisterControllerServer(s, capsV{snapshots: snapshots}) })
	}
	old := serve(false)
	c := leaseCSI(t, quietPool(t), "unix://"+sock)
	has := func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return c.HasController(ctx, csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT)
	}
	if ok, err := has(); ok || err != nil {
		t.Fatalf("before the upgrade: %v, %v; want no snapshots", ok, err)
	}
	old.Stop()
	serve(true)
	deadline := time.Now().Add(10 * time.Second)
	for {
		// Any call makes the client reconnect.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, _ = c.Controller.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
		cancel()
		if ok, err := has(); ok && err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the upgraded upstream's snapshots are still unsupported 10s after it came back")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func insecureCreds() credentials.TransportCredentials { return insecure.NewCredentials() }
