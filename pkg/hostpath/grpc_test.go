package hostpath

import (
	"context"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

// serve registers d on a gRPC server over an in-memory listener and
// returns a client connection: the driver as a standalone upstream serves
// it (Register). The proxy calls its built-in driver in process, without
// gRPC (pkg/upstream/local.go); these tests cover the gRPC service.
func serve(t *testing.T, d *Driver) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	d.Register(srv)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///hostpath",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestServeOverGRPC(t *testing.T) {
	ctx := context.Background()
	d := newTestDriver(t, Options{DriverName: "local.hostpath", Version: "v1.2.3"})
	conn := serve(t, d)
	id := csi.NewIdentityClient(conn)

	info, err := id.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&csi.GetPluginInfoResponse{Name: "local.hostpath", VendorVersion: "v1.2.3"}, info, protocmp.Transform()); diff != "" {
		t.Errorf("GetPluginInfo (-want +got):\n%s", diff)
	}
	caps, err := id.GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wantCaps := &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{
		{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}}},
		{Type: &csi.PluginCapability_VolumeExpansion_{VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: csi.PluginCapability_VolumeExpansion_ONLINE}}},
	}}
	if diff := cmp.Diff(wantCaps, caps, protocmp.Transform()); diff != "" {
		t.Errorf("GetPluginCapabilities (-want +got):\n%s", diff)
	}
	probe, err := id.Probe(ctx, &csi.ProbeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, probe, protocmp.Transform()); diff != "" {
		t.Errorf("Probe (-want +got):\n%s", diff)
	}

	// A volume round trip through the wire.
	ctrl := csi.NewControllerClient(conn)
	created, err := ctrl.CreateVolume(ctx, createReq("wire", 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: created.Volume.VolumeId}); err != nil {
		t.Fatal(err)
	}

	// Deliberately unsupported RPCs answer UNIMPLEMENTED.
	_, err = ctrl.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: created.Volume.VolumeId})
	testkit.WantCode(t, err, codes.Unimplemented)
	_, err = ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: created.Volume.VolumeId, NodeId: "n", VolumeCapability: rwo})
	testkit.WantCode(t, err, codes.Unimplemented)

	// Probe fails once BasePath is gone, so a liveness probe restarts us.
	if err := os.RemoveAll(d.opts.BasePath); err != nil {
		t.Fatal(err)
	}
	_, err = id.Probe(ctx, &csi.ProbeRequest{})
	testkit.WantCode(t, err, codes.FailedPrecondition, "base path")
}

func TestKeyedLocks(t *testing.T) {
	k := newKeyedLocks()
	ctx := context.Background()

	// Opposite orders of the same keys cannot deadlock.
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			keys := []string{"a", "b"}
			if i%2 == 1 {
				keys = []string{"b", "a", "b"}
			}
			unlock, err := k.lock(ctx, keys...)
			if err != nil {
				t.Error(err)
				return
			}
			unlock()
			unlock() // idempotent
		})
	}
	wg.Wait()
	if len(k.locks) != 0 {
		t.Errorf("%d lock entries left after all holders are gone", len(k.locks))
	}

	// A waiter gives up with the context's code.
	unlock, err := k.lock(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err = k.lock(short, "aaa", "held") // takes "aaa", then waits
	testkit.WantCode(t, err, codes.DeadlineExceeded)
	unlock()
	again, cancel2 := context.WithTimeout(ctx, time.Second)
	defer cancel2()
	if _, err := k.lock(again, "aaa"); err != nil {
		t.Errorf("a cancelled waiter kept a lock: %v", err)
	}
}
