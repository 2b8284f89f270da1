// Package inproc benchmarks the paths of ptbench inside one test process: the numbers are less realistic than ptbench's (every server
// shares one Go runtime) but allocations per call are exact, which makes
// this the tool for chasing the proxy's per-call garbage:
//
//	go test -run '^$' -bench . -benchmem ./bench/inproc/
package inproc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/democratic-csi/proxy-topology/bench/noop"
	"github.com/democratic-csi/proxy-topology/bench/rawproxy"
	"github.com/democratic-csi/proxy-topology/bench/typedproxy"
	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/backend"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
	"github.com/democratic-csi/proxy-topology/pkg/upstream"
)

const (
	prefix = "org.democratic-csi.topology"
	handle = "pvc-2f0c6a7e-8d1b-4c55-9e0a-5b3c1d7f9a42"
)

func serve(b *testing.B, srv *grpc.Server, sock string) *grpc.ClientConn {
	b.Helper()
	lis, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	b.Cleanup(srv.Stop)
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	return cc
}

// paths starts the no-op upstream, the raw and typed forwarders and the
// proxy (one connection, "c00000") and returns a client connection to each.
func paths(b *testing.B) map[string]*grpc.ClientConn {
	dir, err := os.MkdirTemp("", "inproc")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	out := map[string]*grpc.ClientConn{}

	noopSrv := grpc.NewServer()
	(&noop.Driver{}).Register(noopSrv)
	noopSock := filepath.Join(dir, "noop.sock")
	out["direct"] = serve(b, noopSrv, noopSock)

	rawSrv, rawCC, err := rawproxy.New("unix://" + noopSock)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rawCC.Close() })
	out["raw"] = serve(b, rawSrv, filepath.Join(dir, "raw.sock"))

	typedSrv, typedCC, err := typedproxy.New("unix://" + noopSock)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { typedCC.Close() })
	out["typed"] = serve(b, typedSrv, filepath.Join(dir, "typed.sock"))

	folder := filepath.Join(dir, "connections")
	if err := os.Mkdir(folder, 0o755); err != nil {
		b.Fatal(err)
	}
	conn := fmt.Sprintf("driver: csi\ncsi:\n  endpoint: unix://%s\nproxy:\n  perDriver:\n    topology:\n    - requirements: {region: region1, zone: zone1}\n      extra: {storage.example.com/pool: pool-0}\n    - requirements: {region: region1, zone: zone2}\n", noopSock)
	if err := os.WriteFile(filepath.Join(folder, "c00000.yaml"), []byte(conn), 0o644); err != nil {
		b.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
	topo := accessible.Options{Prefix: prefix, Type: "zone"}
	pool := upstream.NewPool(log)
	b.Cleanup(pool.Close)
	store := connection.NewStore(connection.Options{Folder: folder, CacheTimeout: time.Hour, Topology: topo, Log: log})
	registry := backend.New(backend.Options{Catalogue: store, Pool: pool, Log: log})
	d, err := pcsi.New(pcsi.Options{Name: "bench", Version: "1", NodeID: "n", Connections: registry, Topology: topo, Log: log})
	if err != nil {
		b.Fatal(err)
	}
	d.SetReady(true)
	proxySrv := pcsi.NewServer(d, log)
	out["proxy"] = serve(b, proxySrv, filepath.Join(dir, "proxy.sock"))
	// The store re-reads a file changed in the last 2 s (its timestamps
	// cannot be trusted yet); production files are older than that.
	time.Sleep(2500 * time.Millisecond)
	return out
}

var order = []string{"direct", "raw", "typed", "proxy"}

func createRequest(name string) *csi.CreateVolumeRequest {
	zone := &csi.Topology{Segments: map[string]string{prefix + "/zone": "zone1"}}
	return &csi.CreateVolumeRequest{
		Name:          name,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}},
		Parameters: map[string]string{
			"connection":                       "c00000",
			"csi.storage.k8s.io/pvc/name":      "data-postgres-0",
			"csi.storage.k8s.io/pvc/namespace": "default",
			"csi.storage.k8s.io/pv/name":       name,
			"csi.storage.k8s.io/fstype":        "ext4",
		},
		AccessibilityRequirements: &csi.TopologyRequirement{Requisite: []*csi.Topology{zone}, Preferred: []*csi.Topology{zone}},
	}
}

func BenchmarkCreateVolume(b *testing.B) {
	ccs := paths(b)
	for _, name := range order {
		c := csi.NewControllerClient(ccs[name])
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			req := createRequest(handle)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.CreateVolume(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkNodeGetVolumeStats(b *testing.B) {
	ccs := paths(b)
	for _, name := range order {
		c := csi.NewNodeClient(ccs[name])
		id := handle
		if name == "proxy" {
			id = "v:c00000/" + handle
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			req := &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: "/var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/" + handle + "/mount"}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.NodeGetVolumeStats(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCreateVolumeParallel is BenchmarkCreateVolume with 64 callers
// per core, as the sidecars' worker pools call under load.
func BenchmarkCreateVolumeParallel(b *testing.B) {
	ccs := paths(b)
	for _, name := range order {
		c := csi.NewControllerClient(ccs[name])
		b.Run(name, func(b *testing.B) {
			req := createRequest(handle)
			b.ReportAllocs()
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					if _, err := c.CreateVolume(ctx, req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
