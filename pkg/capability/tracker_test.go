package capability_test

import (
	"net"
	"path/filepath"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/capability"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
)

// trackedPair accepts one connection through a tracking listener on a
// unix socket and returns both ends.
func trackedPair(t *testing.T, lis net.Listener) (server, client net.Conn) {
	t.Helper()
	accepted := make(chan net.Conn, 1)
	errc := make(chan error, 1)
	go func() {
		c, err := lis.Accept()
		if err != nil {
			errc <- err
			return
		}
		accepted <- c
	}()
	client, err := net.Dial("unix", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	select {
	case server = <-accepted:
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("no connection accepted")
	}
	t.Cleanup(func() { server.Close() })
	return server, client
}

// TestConnTrackerHandsOverUnwrapped: the tracking listener hands gRPC the
// connection the socket accepted, so gRPC reads it only when data is
// ready (its ready-reader takes *net.UnixConn and *net.TCPConn, nothing
// else); connections closed on the server's side (gRPC closes its end
// when a client goes) leave the tracker, open ones stay, and CloseLacking
// closes those told less than what is advertised now.
func TestConnTrackerHandsOverUnwrapped(t *testing.T) {
	raw, err := pcsi.Listen("unix://" + filepath.Join(testkit.SocketDir(t), "csi.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	tracker := &capability.Tracker{}
	lis := tracker.Listener(raw)

	small := capability.Set{Controller: []csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME}}
	grown := capability.Set{Controller: []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT}}
	tracker.Advertise(small)

	first, _ := trackedPair(t, lis)
	if _, ok := first.(*net.UnixConn); !ok {
		t.Fatalf("Accept returned %T, want the socket's own *net.UnixConn", first)
	}
	gone, goneClient := trackedPair(t, lis)
	if n := tracker.Len(); n != 2 {
		t.Fatalf("%d connections tracked, want 2", n)
	}
	goneClient.Close()
	gone.Close()
	if n := tracker.Len(); n != 1 {
		t.Fatalf("%d connections tracked after one was closed, want 1", n)
	}

	tracker.Advertise(grown)
	told, _ := trackedPair(t, lis) // accepted while grown is advertised
	if n := tracker.CloseLacking(grown); n != 1 {
		t.Fatalf("CloseLacking closed %d connections, want 1 (the one told less)", n)
	}
	if _, err := first.Write([]byte("x")); err == nil {
		t.Error("the connection told less is still open")
	}
	if _, err := told.Write([]byte("x")); err != nil {
		t.Errorf("the connection told the grown set was closed: %v", err)
	}
	if n := tracker.Len(); n != 1 {
		t.Fatalf("%d connections tracked after CloseLacking, want 1", n)
	}
}
