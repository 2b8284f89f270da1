// Package testproxy starts the proxy for tests as serve wires it: a
// connection catalogue over a temporary folder (pkg/connection), the
// registry that builds the connections' clients (pkg/backend) over an
// upstream pool, the CSI driver and its gRPC server (pkg/csi) on a unix
// socket, and a client connection to it. Everything it starts is stopped
// when the test ends.
package testproxy

import (
	"log/slog"
	"net"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/backend"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
	"github.com/democratic-csi/proxy-topology/pkg/upstream"
)

// The identity every test proxy has.
const (
	Name    = "proxy.example.com"
	Version = "v-test"
	NodeID  = "node-1"
)

// Config says what differs from one test proxy to another; its zero value
// serves an empty folder, re-read on every call.
type Config struct {
	// Log receives the proxy's messages; nil discards them.
	Log *slog.Logger
	// Catalogue edits the catalogue's options before it is made (its
	// Folder is the proxy's, its cache timeout 0).
	Catalogue func(*connection.Options)
	// Driver edits the driver's options before New; Connections is then
	// set to the registry.
	Driver func(*pcsi.Options)
	// Guard, if set, is the registry's loop guard (serve's refuses
	// connections that route back to the proxy).
	Guard *backend.SelfGuard
	// Observers are told about every call the server serves.
	Observers []pcsi.Observer
	// Listener, if set, wraps the socket's listener (a capability.Tracker's).
	Listener func(net.Listener) net.Listener
	// NotReady leaves Probe reporting not ready: the test calls SetReady
	// when it wants the sidecars' view of a start-up.
	NotReady bool
}

// Proxy is a served test proxy.
type Proxy struct {
	Driver   *pcsi.Driver
	Folder   string
	Pool     *upstream.Pool
	Store    *connection.Store
	Registry *backend.Registry
	// Endpoint is the socket, unix:///path; Conn a client connection to it.
	Endpoint string
	Conn     *grpc.ClientConn
}

// Start serves a proxy configured by cfg until the test ends.
func Start(t testing.TB, cfg Config) *Proxy {
	t.Helper()
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{Folder: t.TempDir(), Pool: upstream.NewPool(log)}
	t.Cleanup(p.Pool.Close)
	co := connection.Options{Folder: p.Folder, Log: log}
	if cfg.Catalogue != nil {
		cfg.Catalogue(&co)
	}
	p.Store = connection.NewStore(co)
	o := pcsi.Options{Name: Name, Version: Version, NodeID: NodeID, Topology: co.Topology, Log: log}
	if cfg.Driver != nil {
		cfg.Driver(&o)
	}
	p.Registry = backend.New(backend.Options{
		Catalogue: p.Store, Pool: p.Pool, Guard: cfg.Guard,
		NodeID: NodeID, DriverName: Name, Version: Version, Log: log,
	})
	o.Connections = p.Registry
	d, err := pcsi.New(o)
	if err != nil {
		t.Fatal(err)
	}
	p.Driver = d
	d.SetReady(!cfg.NotReady)

	path := filepath.Join(testkit.SocketDir(t), "csi.sock")
	lis, err := pcsi.Listen("unix://" + path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listener != nil {
		lis = cfg.Listener(lis)
	}
	srv := pcsi.NewServer(d, log, cfg.Observers...)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	p.Endpoint = "unix://" + path
	p.Conn, err = grpc.NewClient(p.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Conn.Close() })
	return p
}
