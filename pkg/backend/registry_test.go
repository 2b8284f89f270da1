package backend

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/democratic-csi/proxy-topology/pkg/config"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
)

// Connections naming the same endpoint share one upstream client, however
// many connections and reloads there are.
func TestSharedUpstream(t *testing.T) {
	e := newEnv(t, -1)
	e.Write("one", connA)
	e.Write("two", "driver: csi\ncsi:\n  endpoint: unix:///csi/a.sock\n  timeout: 5s\n")
	e.Write("split", "driver: csi\ncsi:\n  endpoint: unix:///csi/a.sock\n  nodeEndpoint: unix:///csi/node.sock\n")
	e.Write("tcp", "driver: csi\ncsi:\n  endpoint: storage.example.com:9000\n")
	e.Write("unixshort", "driver: csi\ncsi:\n  endpoint: unix:/csi/short.sock\n")

	one, two := e.get("one"), e.get("two")
	if one.Controller != two.Controller || one.Controller == nil {
		t.Error("one and two do not share the controller client")
	}
	if one.Node != one.Controller {
		t.Error("without nodeEndpoint, Node must be the Controller client")
	}
	if n := e.pool.Len(); n != 1 {
		t.Errorf("Pool.Len() = %d after two connections to one endpoint, want 1", n)
	}

	split := e.get("split")
	if split.Controller != one.Controller {
		t.Error("split does not share the controller client")
	}
	if split.Node == split.Controller || split.Node.Target != "unix:///csi/node.sock" {
		t.Errorf("split.Node targets %q, want its own client for unix:///csi/node.sock", split.Node.Target)
	}
	if n := e.pool.Len(); n != 2 {
		t.Errorf("Pool.Len() = %d, want 2", n)
	}

	// Every endpoint form the config accepts makes a client without
	// dialing (nothing listens on these).
	e.get("tcp")
	e.get("unixshort")
	if n := e.pool.Len(); n != 4 {
		t.Errorf("Pool.Len() = %d, want 4", n)
	}

	// A reload with the same endpoint builds no new client.
	e.Write("one", connA+"  timeout: 1s\n")
	if c := e.get("one"); c == one || c.Controller != two.Controller {
		t.Error("reloaded one: want a new *Connection on the same client")
	}
	if n := e.pool.Len(); n != 4 {
		t.Errorf("Pool.Len() = %d after a reload, want 4", n)
	}
}

// The built-in driver runs in-process; connections with the same base path
// and driver settings share it (other keys, here csi.timeout, do not
// matter); a connection whose topology makes the driver shared gets one of
// its own.
func TestLocalHostpath(t *testing.T) {
	e := newEnv(t, -1)
	base := t.TempDir()
	local := "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: " + base + "\n"
	e.Write("local", local)
	e.Write("local2", local+"csi:\n  timeout: 5s\n")
	e.Write("zoned", local+"proxy:\n  perDriver:\n    topology:\n    - requirements: {zone: z1}\n")
	if z := e.get("zoned"); z.Controller == e.get("local").Controller {
		t.Error("a shared (zoned) and a node-local connection on one base path share a driver")
	}
	e.store.Close()

	c := e.get("local")
	if c.Controller == nil || c.Node != c.Controller {
		t.Fatal("local-hostpath: want one client for controller and node")
	}
	if c2 := e.get("local2"); c2.Controller != c.Controller {
		t.Error("two connections on one base path do not share the driver")
	}
	if n := e.pool.Len(); n != 1 {
		t.Errorf("Pool.Len() = %d, want 1", n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := c.Controller.Identity.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetName() != "proxy.example.com" || info.GetVendorVersion() != "v-test" {
		t.Errorf("GetPluginInfo = %q %q, want the store's DriverName and Version", info.GetName(), info.GetVendorVersion())
	}
	nodeInfo, err := c.Node.Node.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if nodeInfo.GetNodeId() != "node-1" {
		t.Errorf("NodeGetInfo node id %q, want the store's NodeID", nodeInfo.GetNodeId())
	}
}

// A connection whose upstream cannot be set up is broken like a bad file,
// with the reason.
func TestGetUpstreamFailure(t *testing.T) {
	e := newEnv(t, -1)
	e.Write("nfs", connA)
	e.pool.Close()
	_, _, err := e.reg.Get(context.Background(), "nfs")
	if !errors.Is(err, connection.ErrBroken) || !strings.Contains(err.Error(), "upstream pool is shut down") {
		t.Errorf("Get = %v, want ErrBroken naming the pool", err)
	}
}

// TestBuildKeepsNothing: Build (the check command's) makes a connection's
// clients for its caller alone: the catalogue caches nothing, the
// connection gets no attachment, and Close releases the clients.
func TestBuildKeepsNothing(t *testing.T) {
	e := newEnv(t, -1)
	c := &connection.Connection{Name: "nfs", File: "nfs.yaml", Config: &config.Connection{Driver: config.DriverCSI, CSI: config.CSIUpstream{Endpoint: "unix:///csi/a.sock"}}}
	b, err := e.reg.Build(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if b.Controller == nil || b.Node != b.Controller || c.Attachment() != nil || e.store.Cached() != 0 {
		t.Errorf("Build: controller %v, node %v, attachment %v, %d cached; want one client, no attachment, nothing cached",
			b.Controller, b.Node, c.Attachment(), e.store.Cached())
	}
	e.wantTargets("after Build", "unix:///csi/a.sock")
	b.Close()
	e.wantTargets("after Close")
}
