package typedproxy

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/democratic-csi/proxy-topology/bench/noop"
)

func serve(t *testing.T, srv *grpc.Server, sock string) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// forwarder serves a Forwarder in front of up and returns a client of it.
func forwarder(t *testing.T, up *grpc.Server) *grpc.ClientConn {
	t.Helper()
	dir := t.TempDir()
	serve(t, up, filepath.Join(dir, "up.sock"))
	srv, cc, err := New("unix://" + filepath.Join(dir, "up.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return serve(t, srv, filepath.Join(dir, "typed.sock"))
}

// The forwarder relays requests, answers and errors unchanged.
func TestForwards(t *testing.T) {
	up := grpc.NewServer()
	(&noop.Driver{}).Register(up)
	client := forwarder(t, up)
	ctx := context.Background()

	resp, err := csi.NewControllerClient(client).CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: "vol-1", CapacityRange: &csi.CapacityRange{RequiredBytes: 42},
	})
	if err != nil {
		t.Fatal(err)
	}
	if v := resp.GetVolume(); v.GetVolumeId() != "vol-1" || v.GetCapacityBytes() != 42 {
		t.Errorf("CreateVolume = %v", v)
	}
	stats, err := csi.NewNodeClient(client).NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "vol-1", VolumePath: "/x"})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := (&noop.Driver{}).NodeGetVolumeStats(ctx, nil)
	if !proto.Equal(stats, want) {
		t.Errorf("NodeGetVolumeStats = %v, want %v", stats, want)
	}
	probe, err := csi.NewIdentityClient(client).Probe(ctx, &csi.ProbeRequest{})
	if err != nil || !probe.GetReady().GetValue() {
		t.Errorf("Probe = %v, %v", probe, err)
	}
	// The no-op driver does not implement NodeStageVolume.
	_, err = csi.NewNodeClient(client).NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "vol-1"})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("NodeStageVolume: %v, want the upstream's Unimplemented", err)
	}
}

// Every method of the three services reaches the upstream: none falls
// through to the embedded Unimplemented servers. The upstream answers each
// call with an error naming the method it saw, which the forwarder relays.
func TestForwardsEveryMethod(t *testing.T) {
	up := grpc.NewServer(grpc.UnaryInterceptor(func(_ context.Context, _ any, info *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
		return nil, status.Error(codes.Aborted, "upstream saw "+info.FullMethod)
	}))
	csi.RegisterIdentityServer(up, csi.UnimplementedIdentityServer{})
	csi.RegisterControllerServer(up, csi.UnimplementedControllerServer{})
	csi.RegisterNodeServer(up, csi.UnimplementedNodeServer{})
	client := forwarder(t, up)

	n := 0
	for _, desc := range []grpc.ServiceDesc{csi.Identity_ServiceDesc, csi.Controller_ServiceDesc, csi.Node_ServiceDesc} {
		for _, m := range desc.Methods {
			method := "/" + desc.ServiceName + "/" + m.MethodName
			// An empty message is a valid encoding of every request type.
			err := client.Invoke(context.Background(), method, &emptypb.Empty{}, &emptypb.Empty{})
			if st := status.Convert(err); st.Code() != codes.Aborted || st.Message() != "upstream saw "+method {
				t.Errorf("%s: %v, want the upstream's answer", method, err)
			}
			n++
		}
	}
	if n != 30 {
		t.Errorf("checked %d methods; the CSI spec in go.mod has 30 in Identity, Controller and Node", n)
	}
}
