package upstream

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
)

// capsServer advertises CREATE_DELETE_VOLUME and GET_VOLUME_STATS and
// counts capability calls.
type capsServer struct {
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer
	calls chan string
}

func (s capsServer) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	s.calls <- "controller"
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: []*csi.ControllerServiceCapability{{
		Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME}},
	}}}, nil
}

func (s capsServer) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	s.calls <- "node"
	return &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{{
		Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: csi.NodeServiceCapability_RPC_GET_VOLUME_STATS}},
	}}}, nil
}

// Cached* know nothing before discovery, then answer what discovery found
// without calling the upstream again.
func TestCachedCapabilities(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "up.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := capsServer{calls: make(chan string, 10)}
	s := grpc.NewServer()
	csi.RegisterControllerServer(s, srv)
	csi.RegisterNodeServer(s, srv)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(l) }()
	t.Cleanup(func() { s.Stop(); <-done })

	c, err := quietPool(t).CSI("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, known := c.CachedController(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME); known {
		t.Error("CachedController known before discovery")
	}
	if _, known := c.CachedNode(csi.NodeServiceCapability_RPC_GET_VOLUME_STATS); known {
		t.Error("CachedNode known before discovery")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ok, err := c.HasController(ctx, csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME); !ok || err != nil {
		t.Fatalf("HasController = %v, %v", ok, err)
	}
	if ok, err := c.HasNode(ctx, csi.NodeServiceCapability_RPC_GET_VOLUME_STATS); !ok || err != nil {
		t.Fatalf("HasNode = %v, %v", ok, err)
	}
	check := func(name string, has, known, wantHas bool) {
		t.Helper()
		if has != wantHas || !known {
			t.Errorf("%s: has=%v known=%v, want has=%v known=true", name, has, known, wantHas)
		}
	}
	has, known := c.CachedController(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME)
	check("controller advertised", has, known, true)
	has, known = c.CachedController(csi.ControllerServiceCapability_RPC_GET_CAPACITY)
	check("controller not advertised", has, known, false)
	has, known = c.CachedNode(csi.NodeServiceCapability_RPC_GET_VOLUME_STATS)
	check("node advertised", has, known, true)
	has, known = c.CachedNode(csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	check("node not advertised", has, known, false)
	if n := len(srv.calls); n != 2 {
		t.Errorf("%d capability calls, want 2 (one discovery each)", n)
	}
}
