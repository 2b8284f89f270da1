package upstream

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
)

// BenchmarkLocalHop measures what the proxy's path to its built-in driver
// costs (issue 19): the same CreateVolume+DeleteVolume pair through the
// leased client (the upstream interceptor and invokeLocal; until issue 19
// an encode, an in-memory gRPC connection and a decode each way) and by
// calling the driver's methods directly, on a base path in tmpfs (/dev/shm)
// so that the disk does not hide the difference, and on the test's
// temporary directory (a disk). Compare ns/op within one run.
func BenchmarkLocalHop(b *testing.B) {
	for _, where := range []string{"/dev/shm", os.TempDir()} {
		for _, via := range []string{"client", "direct"} {
			b.Run(fmt.Sprintf("%s/%s", where, via), func(b *testing.B) {
				base, err := os.MkdirTemp(where, "localhop-")
				if err != nil {
					b.Skip(err)
				}
				defer os.RemoveAll(base)
				p := NewPool(slog.New(slog.NewTextHandler(io.Discard, nil)))
				defer p.Close()
				l, err := p.Local(context.Background(), "bench", hostpath.Options{
					DriverName: "hop.bench", NodeID: "n", BasePath: base,
					Logger: slog.New(slog.DiscardHandler),
				})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Release()
				var ctrl interface {
					CreateVolume(context.Context, *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error)
					DeleteVolume(context.Context, *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error)
				}
				ctrl = l.Client().local.driver
				if via == "client" {
					ctrl = clientController{l.Client().Controller}
				}
				ctx := context.Background()
				capab := []*csi.VolumeCapability{{
					AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
					AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
				}}
				b.ResetTimer()
				for i := range b.N {
					resp, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{
						Name: fmt.Sprintf("hop-%d", i), VolumeCapabilities: capab,
						Parameters: map[string]string{"connection": "bench", "csi.storage.k8s.io/pv/name": "pv"},
					})
					if err != nil {
						b.Fatal(err)
					}
					if _, err := ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: resp.GetVolume().GetVolumeId()}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// clientController drops the grpc.CallOption parameter.
type clientController struct{ c csi.ControllerClient }

func (b clientController) CreateVolume(ctx context.Context, r *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	return b.c.CreateVolume(ctx, r)
}

func (b clientController) DeleteVolume(ctx context.Context, r *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	return b.c.DeleteVolume(ctx, r)
}
