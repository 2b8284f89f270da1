package rawproxy

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

// The forwarder relays requests, answers and errors unchanged.
func TestForwards(t *testing.T) {
	dir := t.TempDir()
	up := grpc.NewServer()
	(&noop.Driver{}).Register(up)
	serve(t, up, filepath.Join(dir, "up.sock"))

	srv, cc, err := New("unix://" + filepath.Join(dir, "up.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	client := serve(t, srv, filepath.Join(dir, "raw.sock"))
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
	// The no-op driver does not implement NodeStageVolume.
	_, err = csi.NewNodeClient(client).NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "vol-1"})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("NodeStageVolume: %v, want the upstream's Unimplemented", err)
	}
}

func TestCodec(t *testing.T) {
	var c Codec
	in := []byte{1, 2, 3}
	out, err := c.Marshal(&in)
	if err != nil || string(out) != string(in) {
		t.Fatalf("Marshal = %v, %v", out, err)
	}
	var got []byte
	if err := c.Unmarshal(in, &got); err != nil || string(got) != string(in) {
		t.Fatalf("Unmarshal = %v, %v", got, err)
	}
	if _, err := c.Marshal("x"); err == nil {
		t.Error("Marshal(string) succeeded")
	}
	if err := c.Unmarshal(in, new(string)); err == nil {
		t.Error("Unmarshal into *string succeeded")
	}
}
