package csi_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/democratic-csi/proxy-topology/internal/syncbuf"
	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/internal/testproxy"
	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/backend"
	"github.com/democratic-csi/proxy-topology/pkg/capability"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
	"github.com/democratic-csi/proxy-topology/pkg/logging"
	"github.com/democratic-csi/proxy-topology/pkg/upstream"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testPrefix is the node topology prefix every test proxy uses.
const testPrefix = "topo.example.com"

var testTopology = accessible.Options{Prefix: testPrefix, Type: "zone"}

// secretMarker is part of every secret value a test sends or configures;
// no log line may ever contain it.
const secretMarker = "s3cr3t"

// lockedBuffer is a bytes.Buffer safe for the concurrent writes of a
// logger shared by handlers.
type lockedBuffer = syncbuf.Buffer

// testProxy is the proxy driver served on a real unix socket, with a
// client for each service and its log captured as JSON at debug level.
type testProxy struct {
	// Driver is the served driver, for calls that must see the server-side
	// request object (the gRPC client never shares it).
	Driver *pcsi.Driver
	Folder string
	// Pool is the proxy's upstream pool, to count its clients; Store is
	// its connection catalogue and Registry what builds their clients.
	Pool       *upstream.Pool
	Store      *connection.Store
	Registry   *backend.Registry
	Endpoint   string
	Identity   csi.IdentityClient
	Controller csi.ControllerClient
	Node       csi.NodeClient
	Logs       *lockedBuffer
}

// startProxy serves a proxy whose connection folder is empty; options edit
// the driver options before New. Every server and client it starts is
// stopped when the test ends, and the log is checked for secrets then.
func startProxy(t *testing.T, opts ...func(*pcsi.Options)) *testProxy {
	t.Helper()
	return startProxyStore(t, nil, opts...)
}

// startProxyStore is startProxy with storeOpt editing the connection store's
// options (say, its cache timeout) before the store is made.
func startProxyStore(t *testing.T, storeOpt func(*connection.Options), opts ...func(*pcsi.Options)) *testProxy {
	t.Helper()
	return startProxyGuard(t, nil, storeOpt, opts...)
}

// startProxyGuard is startProxyStore with guard as the registry's loop
// guard (nil: none), as serve wires it.
func startProxyGuard(t *testing.T, guard *backend.SelfGuard, storeOpt func(*connection.Options), opts ...func(*pcsi.Options)) *testProxy {
	t.Helper()
	logs := &lockedBuffer{}
	tp := testproxy.Start(t, testproxy.Config{
		Guard: guard,
		Log:   jsonLogger(t, logs, "debug"),
		Catalogue: func(o *connection.Options) {
			// Re-read on every call so a test can add or remove files.
			o.CacheTimeout, o.Topology = 0, testTopology
			if storeOpt != nil {
				storeOpt(o)
			}
		},
		Driver: func(o *pcsi.Options) {
			o.Topology, o.RollbackTimeout = testTopology, 5*time.Second
			for _, f := range opts {
				f(o)
			}
		},
	})
	t.Cleanup(func() {
		if s := logs.String(); strings.Contains(s, secretMarker) {
			t.Errorf("log contains a secret value:\n%s", s)
		}
	})
	return &testProxy{
		Driver: tp.Driver, Folder: tp.Folder, Pool: tp.Pool, Store: tp.Store, Registry: tp.Registry, Endpoint: tp.Endpoint, Logs: logs,
		Identity: csi.NewIdentityClient(tp.Conn), Controller: csi.NewControllerClient(tp.Conn), Node: csi.NewNodeClient(tp.Conn),
	}
}

// conn describes a driver: csi connection file.
type conn struct {
	Endpoint     string
	NodeEndpoint string
	Timeout      string
	Parameters   map[string]string
	Secrets      map[string]string
	Topology     []accessible.Entry
	// UpstreamTopology is proxy.perDriver.upstreamTopology.
	UpstreamTopology map[string]string
}

// add writes <name>.yaml into the proxy's connection folder.
func (p *testProxy) add(t *testing.T, name string, c conn) {
	t.Helper()
	up := map[string]any{"endpoint": c.Endpoint}
	if c.NodeEndpoint != "" {
		up["nodeEndpoint"] = c.NodeEndpoint
	}
	if c.Timeout != "" {
		up["timeout"] = c.Timeout
	}
	if c.Parameters != nil {
		up["parameters"] = c.Parameters
	}
	if c.Secrets != nil {
		up["secrets"] = c.Secrets
	}
	doc := map[string]any{"driver": "csi", "csi": up}
	perDriver := map[string]any{}
	if c.Topology != nil {
		perDriver["topology"] = c.Topology
	}
	if c.UpstreamTopology != nil {
		perDriver["upstreamTopology"] = c.UpstreamTopology
	}
	if len(perDriver) > 0 {
		doc["proxy"] = map[string]any{"perDriver": perDriver}
	}
	data, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	p.write(t, name, string(data))
}

// write puts raw content into <name>.yaml.
func (p *testProxy) write(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(p.Folder, name+".yaml"), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// remove deletes <name>.yaml.
func (p *testProxy) remove(t *testing.T, name string) {
	t.Helper()
	if err := os.Remove(filepath.Join(p.Folder, name+".yaml")); err != nil {
		t.Fatal(err)
	}
}

// withDefault sets proxy.defaultConnection.
func withDefault(name string) func(*pcsi.Options) {
	return func(o *pcsi.Options) { o.DefaultConnection = name }
}

// withControllerPublish turns on proxy.controllerPublish.
func withControllerPublish(o *pcsi.Options) {
	caps, err := capability.Resolve(nil, nil, true)
	if err != nil {
		panic(err)
	}
	o.Capabilities = caps
}

// callCtx bounds a test's calls so a regression hangs for seconds, not
// until the test binary's timeout.
func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// diff compares protos (or anything containing them).
func diff(want, got any) string {
	return cmp.Diff(want, got, protocmp.Transform())
}

// topo builds a topology term.
func topo(kv ...string) *csi.Topology {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &csi.Topology{Segments: m}
}

// serveGRPC serves srv on a unix socket at path and returns a client
// connection to it; both are stopped when the test ends.
func serveGRPC(tb testing.TB, path string, srv *grpc.Server, dial ...grpc.DialOption) *grpc.ClientConn {
	tb.Helper()
	if testkit.Serve(tb, path, srv) == nil {
		tb.FailNow()
	}
	conn, err := grpc.NewClient("unix://"+path, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dial...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return conn
}

// jsonLogger is the production JSON logger (pkg/logging) writing to w.
func jsonLogger(t *testing.T, w io.Writer, level string) *slog.Logger {
	t.Helper()
	log, err := logging.New(w, "json", level)
	if err != nil {
		t.Fatal(err)
	}
	return log
}

// serviceFunc registers services with a function, for test servers.
type serviceFunc func(*grpc.Server)

func (f serviceFunc) Register(s *grpc.Server) { f(s) }
