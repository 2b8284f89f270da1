package upstream

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
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

// Capabilities are discovered once per client and answered from the cache
// after that, advertised or not.
func TestCapabilitiesCached(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "up.sock")
	srv := capsServer{calls: make(chan string, 10)}
	testkit.ServeUnix(t, sock, func(s *grpc.Server) {
		csi.RegisterControllerServer(s, srv)
		csi.RegisterNodeServer(s, srv)
	})

	c := leaseCSI(t, quietPool(t), "unix://"+sock)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 3 {
		for _, tc := range []struct {
			name string
			has  func() (bool, error)
			want bool
		}{
			{"controller advertised", func() (bool, error) {
				return c.HasController(ctx, csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME)
			}, true},
			{"controller not advertised", func() (bool, error) { return c.HasController(ctx, csi.ControllerServiceCapability_RPC_GET_CAPACITY) }, false},
			{"node advertised", func() (bool, error) { return c.HasNode(ctx, csi.NodeServiceCapability_RPC_GET_VOLUME_STATS) }, true},
			{"node not advertised", func() (bool, error) { return c.HasNode(ctx, csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME) }, false},
		} {
			if got, err := tc.has(); got != tc.want || err != nil {
				t.Errorf("%s: %v, %v; want %v", tc.name, got, err, tc.want)
			}
		}
	}
	if n := len(srv.calls); n != 2 {
		t.Errorf("%d capability calls, want 2 (one discovery each)", n)
	}
}

// changingServer advertises the controller capabilities in caps, which a
// test changes between calls, and counts the calls.
type changingServer struct {
	csi.UnimplementedControllerServer
	mu    sync.Mutex
	caps  []csi.ControllerServiceCapability_RPC_Type
	calls int
}

func (s *changingServer) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	resp := &csi.ControllerGetCapabilitiesResponse{}
	for _, t := range s.caps {
		resp.Capabilities = append(resp.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return resp, nil
}

func (s *changingServer) set(caps ...csi.ControllerServiceCapability_RPC_Type) (calls int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.caps = caps
	return s.calls
}

// TestRefreshUpdatesCache: RefreshController always asks the upstream and
// stores its answer where HasController reads, so the capability refresh
// and the per-call checks agree: a capability the upstream gained is seen
// by HasController after a refresh, with no call of its own.
func TestRefreshUpdatesCache(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "up.sock")
	srv := &changingServer{caps: []csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME}}
	testkit.ServeUnix(t, sock, func(s *grpc.Server) { csi.RegisterControllerServer(s, srv) })

	c := leaseCSI(t, quietPool(t), "unix://"+sock)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	snap := csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT
	if ok, err := c.HasController(ctx, snap); ok || err != nil {
		t.Fatalf("HasController(snapshots) before = %v, %v; want false", ok, err)
	}
	srv.set(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, snap)
	// The cache still answers from the first discovery.
	if ok, _ := c.HasController(ctx, snap); ok {
		t.Fatal("HasController asked again on a cache hit")
	}
	got, err := c.RefreshController(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1] != snap {
		t.Errorf("RefreshController = %v, want [CREATE_DELETE_VOLUME CREATE_DELETE_SNAPSHOT]", got)
	}
	if ok, err := c.HasController(ctx, snap); !ok || err != nil {
		t.Errorf("HasController(snapshots) after the refresh = %v, %v; want true", ok, err)
	}
	if calls := srv.set(); calls != 2 {
		t.Errorf("%d capability calls, want 2 (the discovery and the refresh)", calls)
	}
}
