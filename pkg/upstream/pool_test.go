package upstream

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// identity answers Probe, naming itself in a way the test can check.
type identity struct {
	csi.UnimplementedIdentityServer
	name string
}

func (i identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: i.name, VendorVersion: "1"}, nil
}

// serveOn serves an identity server on l until the test ends or stop is
// called.
func serveOn(t *testing.T, l net.Listener, name string) (stop func()) {
	t.Helper()
	s := grpc.NewServer()
	csi.RegisterIdentityServer(s, identity{name: name})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(l)
	}()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			s.Stop()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

func quietPool(t *testing.T) *Pool {
	p := NewPool(slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(p.Close)
	return p
}

func pluginName(c *Client, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp, err := c.Identity.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	return resp.GetName(), err
}

// TestCSIHostPortIsTCP: a host:port endpoint is dialled over TCP, never
// read as a gRPC scheme. Here "unix-abstract:<n>" is a valid host:port, and
// an abstract unix socket called <n> waits for gRPC to mistake it.
func TestCSIHostPortIsTCP(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, tcp, "tcp")
	port := tcp.Addr().(*net.TCPAddr).Port
	p := quietPool(t)
	for _, ep := range []string{fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("localhost:%d", port)} {
		c := leaseCSI(t, p, ep)
		if name, err := pluginName(c, 10*time.Second); err != nil || name != "tcp" {
			t.Errorf("%s: GetPluginInfo = %q, %v; want the TCP server", ep, name, err)
		}
	}

	abstractName := fmt.Sprint(20000 + os.Getpid()%40000)
	abstract, err := net.Listen("unix", "@"+abstractName)
	if err != nil {
		t.Skipf("no abstract unix sockets here: %v", err)
	}
	serveOn(t, abstract, "abstract")
	c := leaseCSI(t, p, "unix-abstract:"+abstractName)
	name, err := pluginName(c, 3*time.Second)
	if err == nil {
		t.Fatalf("host:port endpoint unix-abstract:%s reached %q over an abstract unix socket", abstractName, name)
	}
	if c.Target != "unix-abstract:"+abstractName {
		t.Errorf("Target = %q, want the endpoint as configured", c.Target)
	}
}

// TestCSIReconnectsSoonAfterOutage: an upstream that was down for a while
// is used again within about a second of coming back. gRPC's default
// backoff would have grown to several seconds by then (and to two minutes
// after a long outage), failing every call in between.
func TestCSIReconnectsSoonAfterOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a 10s outage")
	}
	path := filepath.Join(t.TempDir(), "up.sock")
	listen := func() net.Listener {
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	stop := serveOn(t, listen(), "up")
	c := leaseCSI(t, quietPool(t), "unix://"+path)
	if _, err := pluginName(c, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	stop()
	// While it is down, calls fail fast with UNAVAILABLE and each failure
	// lets gRPC's backoff grow.
	down := time.Now()
	for time.Since(down) < 10*time.Second {
		if _, err := pluginName(c, time.Second); status.Code(err) != codes.Unavailable && status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("upstream down: got %v, want UNAVAILABLE", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	serveOn(t, listen(), "up")
	back := time.Now()
	for {
		if _, err := pluginName(c, time.Second); err == nil {
			break
		}
		if time.Since(back) > 10*time.Second {
			t.Fatal("upstream back for 10s, calls still fail")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d := time.Since(back); d > 2500*time.Millisecond {
		t.Errorf("calls succeeded again %v after the upstream came back, want about a second at most", d)
	} else {
		t.Logf("calls succeed again %v after the upstream came back", d)
	}
}

// TestCSISharedByCanonicalEndpoint: two spellings of one endpoint
// (unix:/a, unix:///a, unix:///x/../a) lease one client; another endpoint
// gets its own.
func TestCSISharedByCanonicalEndpoint(t *testing.T) {
	p := quietPool(t)
	dir := t.TempDir()
	a := leaseCSI(t, p, "unix:"+dir+"/a.sock")
	for _, ep := range []string{"unix://" + dir + "/a.sock", "unix://" + dir + "/x/../a.sock"} {
		if c := leaseCSI(t, p, ep); c != a {
			t.Errorf("%s: a client of its own, want the one of unix:%s/a.sock", ep, dir)
		}
	}
	if c := leaseCSI(t, p, "unix://"+dir+"/b.sock"); c == a {
		t.Error("another socket shares the client of a.sock")
	}
	if n := p.Len(); n != 2 {
		t.Errorf("Pool.Len() = %d, want 2", n)
	}
}
