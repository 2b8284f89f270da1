package hostpath

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

// BenchmarkPair is one CreateVolume+DeleteVolume pair on the driver,
// called directly, 16 at a time, on the test's temporary directory (run
// with -cpuprofile to see where a pair's CPU goes).
func BenchmarkPair(b *testing.B) {
	d, err := New(Options{DriverName: "pair.bench", NodeID: "n", BasePath: filepath.Join(b.TempDir(), "base"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	var n atomic.Int64
	caps := []*csi.VolumeCapability{testkit.MountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			resp, err := d.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: fmt.Sprintf("pair-%d", n.Add(1)), VolumeCapabilities: caps})
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: resp.GetVolume().GetVolumeId()}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
