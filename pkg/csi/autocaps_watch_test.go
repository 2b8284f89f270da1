package csi_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/internal/testproxy"
	"github.com/democratic-csi/proxy-topology/pkg/capability"
	"github.com/democratic-csi/proxy-topology/pkg/config"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
)

// trackedProxy serves a proxy driver with auto capabilities on a unix
// socket whose accepted connections a ConnTracker tracks, as serve does,
// and dials one client to it, as a sidecar does.
type trackedProxy struct {
	*testProxy
	Accepted *capability.Tracker
	Client   *grpc.ClientConn
}

func startTrackedProxy(t *testing.T) *trackedProxy {
	t.Helper()
	logs := &lockedBuffer{}
	policy, err := capability.NewPolicy(config.Capabilities{}, false)
	if err != nil {
		t.Fatal(err)
	}
	accepted := &capability.Tracker{}
	tp := testproxy.Start(t, testproxy.Config{
		Log:       jsonLogger(t, logs, "debug"),
		Catalogue: func(o *connection.Options) { o.Topology = testTopology },
		Driver: func(o *pcsi.Options) {
			o.Topology, o.Policy, o.CapabilityTimeout, o.Accepted = testTopology, &policy, 2*time.Second, accepted
		},
		Listener: accepted.Listener,
		NotReady: true,
	})
	return &trackedProxy{
		testProxy: &testProxy{Driver: tp.Driver, Folder: tp.Folder, Pool: tp.Pool, Store: tp.Store, Registry: tp.Registry, Endpoint: tp.Endpoint, Logs: logs,
			Identity: csi.NewIdentityClient(tp.Conn), Controller: csi.NewControllerClient(tp.Conn), Node: csi.NewNodeClient(tp.Conn)},
		Accepted: accepted, Client: tp.Conn,
	}
}

// connect makes the client's connection (a Probe, as a sidecar's first
// call) and waits until the proxy has accepted it.
func (p *trackedProxy) connect(t *testing.T) {
	t.Helper()
	if _, err := p.Identity.Probe(callCtx(t), &csi.ProbeRequest{}); err != nil {
		t.Fatal(err)
	}
	// gRPC publishes the channel's state through its balancer after the
	// call has its transport, so READY may follow the call's answer.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for st := p.Client.GetState(); st != connectivity.Ready; st = p.Client.GetState() {
		if !p.Client.WaitForStateChange(ctx, st) {
			t.Fatalf("client state %s after a call, want READY", st)
		}
	}
	if n := p.Accepted.Len(); n != 1 {
		t.Fatalf("%d connections tracked, want 1", n)
	}
}

// dropped reports whether the client's connection left READY within wait.
func (p *trackedProxy) dropped(wait time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	return p.Client.WaitForStateChange(ctx, connectivity.Ready)
}

// TestGrowthClosesClientConnections: when what the proxy advertises grows
// after Probe reported ready, the proxy closes the connections its CSI
// socket accepted that were told less (the sidecars exit on connection
// loss and are restarted, reading the new set), with one warning; new
// connections are accepted as usual. A refresh that changes nothing or
// shrinks the set, growth before Probe reported ready, and growth back to
// what a connection was told (a file broken for a moment while edited)
// close nothing; a sidecar that connected while the set was smaller is
// closed when it grows.
func TestGrowthClosesClientConnections(t *testing.T) {
	snap := newFakeUpstream(t, withControllerCaps(csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT), withNodeCaps())
	vol := newFakeUpstream(t, withControllerCaps(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME), withNodeCaps())
	p := startTrackedProxy(t)
	const closedMsg = "closed the CSI socket's client connections"

	// Growth before Probe reported ready: no sidecar has read the set.
	p.Driver.RefreshCapabilities(callCtx(t)) // the first: nothing
	p.connect(t)
	p.add(t, "snap", conn{Endpoint: snap.Endpoint})
	p.Driver.RefreshCapabilities(callCtx(t))
	if p.dropped(300 * time.Millisecond) {
		t.Fatal("growth before Probe reported ready closed the client's connection")
	}
	p.Driver.SetReady(true)

	steps := []struct {
		name   string
		change func()
		closed bool
	}{
		{"unchanged", func() {}, false},
		{"grows", func() { p.add(t, "vol", conn{Endpoint: vol.Endpoint}) }, true},
		{"shrinks", func() { p.remove(t, "vol") }, false},
		// The connection was accepted while vol was advertised.
		{"grows back to what it was told", func() { p.add(t, "vol", conn{Endpoint: vol.Endpoint}) }, false},
	}
	for _, s := range steps {
		p.connect(t)
		s.change()
		p.Driver.RefreshCapabilities(callCtx(t))
		wait := 300 * time.Millisecond
		if s.closed {
			wait = 10 * time.Second
		}
		if got := p.dropped(wait); got != s.closed {
			t.Errorf("%s: connection closed = %t, want %t", s.name, got, s.closed)
		}
	}
	// A sidecar that starts while vol is gone is told less, and is closed
	// when vol comes back; the first client, told vol, is not.
	p.remove(t, "vol")
	p.Driver.RefreshCapabilities(callCtx(t))
	p.connect(t)
	late, err := grpc.NewClient(p.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	if _, err := csi.NewIdentityClient(late).Probe(callCtx(t), &csi.ProbeRequest{}); err != nil {
		t.Fatal(err)
	}
	p.add(t, "vol", conn{Endpoint: vol.Endpoint})
	p.Driver.RefreshCapabilities(callCtx(t))
	lateCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !late.WaitForStateChange(lateCtx, connectivity.Ready) {
		t.Error("the sidecar that connected while vol was gone was not closed when vol came back")
	}
	if p.dropped(300 * time.Millisecond) {
		t.Error("the client told vol was closed when vol came back")
	}
	if got := strings.Count(p.Logs.String(), closedMsg); got != 2 {
		t.Errorf("%d warnings that connections were closed, want 2 (one per growth past what a connection was told):\n%s", got, p.Logs.String())
	}
}

// TestRetryUnconfirmedSoon: an upstream that is not listening when the
// proxy starts is asked again after 1s, 2s… rather than at the next
// interval (an hour here); Confirmed is closed once it answers, and what
// it advertises is added.
func TestRetryUnconfirmedSoon(t *testing.T) {
	f := newFakeUpstream(t, withControllerCaps(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME), withNodeCaps())
	p := startTrackedProxy(t)
	// Not there yet: the socket appears later, as an upstream that starts
	// after the proxy.
	later := filepath.Join(testkit.SocketDir(t), "later.sock")
	p.add(t, "late", conn{Endpoint: "unix://" + later})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); p.Driver.WatchCapabilities(ctx, time.Hour) }()
	defer func() { cancel(); <-stopped }()

	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.Logs.String(), "could not be asked") {
		if time.Now().After(deadline) {
			t.Fatal("the first refresh did not run")
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case <-p.Driver.Confirmed():
		t.Fatal("Confirmed with an upstream that could not be asked")
	default:
	}
	if err := os.Symlink(strings.TrimPrefix(f.Endpoint, "unix://"), later); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Driver.Confirmed():
	case <-time.After(15 * time.Second):
		t.Fatal("not confirmed 15s after the upstream started listening (interval: an hour)")
	}
	if got := p.Driver.Capabilities().Controller; !containsCap(got, csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME) {
		t.Errorf("advertised controller capabilities %v lack CREATE_DELETE_VOLUME", got)
	}
}

// TestConfirmedWithoutConnections: with no connection at all the first
// refresh confirms everything, so an install with an empty connection
// Secret becomes ready at once (and is not restarted by its liveness
// probe); a connection file that does not load does not hold readiness
// either, since waiting does not fix it, while an upstream that does not
// answer does, and is the only one marked for a retry.
func TestConfirmedWithoutConnections(t *testing.T) {
	for _, tc := range []struct {
		name      string
		files     map[string]string
		confirmed bool
	}{
		{"no connection", nil, true},
		{"a broken file", map[string]string{"broken": "driver: csi\n"}, true},
		{"an upstream not listening", map[string]string{"gone": "driver: csi\ncsi:\n  endpoint: unix:///nonexistent/up.sock\n"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startTrackedProxy(t)
			for name, content := range tc.files {
				p.write(t, name, content)
			}
			_, unconfirmed := p.Driver.RefreshCapabilities(callCtx(t))
			for _, u := range unconfirmed {
				if want := !tc.confirmed; u.Retry != want {
					t.Errorf("%s: Retry = %t, want %t (%v)", u.Connection, u.Retry, want, u.Err)
				}
			}
			select {
			case <-p.Driver.Confirmed():
				if !tc.confirmed {
					t.Error("confirmed with an upstream that did not answer")
				}
			default:
				if tc.confirmed {
					t.Errorf("not confirmed after a refresh (unconfirmed %v)", unconfirmed)
				}
			}
		})
	}
}
