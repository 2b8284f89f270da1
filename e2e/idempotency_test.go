package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/internal/testbin"
	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

// racers is how many goroutines send the same request at once.
const racers = 10

// raceSame sends the same call from racers goroutines released together
// and returns every result; every one must succeed (CSI: a repeated call
// with the same arguments succeeds with the same result).
func raceSame[T any](t *testing.T, what string, call func(ctx context.Context) (T, error)) []T {
	t.Helper()
	start := make(chan struct{})
	out := make([]T, racers)
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i], errs[i] = call(callCtx(t))
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s, racer %d of %d: %v", what, i, racers, err)
		}
	}
	return out
}

// same fails unless every value equals the first.
func same[T comparable](t *testing.T, what string, values []T) T {
	t.Helper()
	for i, v := range values {
		if v != values[0] {
			t.Fatalf("%s: racer %d got %v, racer 0 got %v", what, i, v, values[0])
		}
	}
	return values[0]
}

// entries counts what is in dir (0 when it does not exist).
func entries(t *testing.T, dir string) int {
	t.Helper()
	des, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return len(des)
}

// mounts counts the mounts stacked on path.
func mounts(t *testing.T, path string) int {
	t.Helper()
	n := 0
	for _, m := range mountPoints(t) {
		if m == filepath.Clean(path) {
			n++
		}
	}
	return n
}

// TestIdempotentRaces sends each of CreateVolume, CreateSnapshot,
// NodeStageVolume, NodePublishVolume, NodeUnpublishVolume,
// NodeUnstageVolume, DeleteSnapshot and DeleteVolume from 10 goroutines at
// once, then once more, through the proxy to a separate local-hostpath
// upstream process and to the built-in one. Every call succeeds with the
// same answer, and the storage holds exactly one object (directory, mount)
// each time, then none.
func TestIdempotentRaces(t *testing.T) {
	dir := newTestDir(t)
	bases := map[string]string{"ext": filepath.Join(dir, "storage", "ext"), "builtin": filepath.Join(dir, "storage", "builtin")}
	cfg := func(name, content string) string {
		p := filepath.Join(dir, "config", name+".yaml")
		testkit.WriteFile(t, p, content, 0o640)
		return p
	}
	up := launch(t, dir, processSpec{name: "up", mode: "all", nodeID: "up", config: cfg("up", upstreamConfig(bases["ext"], true))})
	connDir := filepath.Join(dir, "connections")
	testkit.WriteFile(t, filepath.Join(connDir, "ext.yaml"), "driver: csi\ncsi:\n  endpoint: unix://"+up.sock+"\n", 0o640)
	testkit.WriteFile(t, filepath.Join(connDir, "builtin.yaml"), "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: "+bases["builtin"]+"\n  stage: true\n", 0o640)
	proxy := launch(t, dir, processSpec{name: "proxy", mode: "all", nodeID: "node-1",
		config: cfg("proxy", fmt.Sprintf("driver: proxy\nproxy:\n  configFolder: %s\n", connDir))})
	up.waitReady(t)
	proxy.waitReady(t)
	ctrl, node := csi.NewControllerClient(proxy.conn), csi.NewNodeClient(proxy.conn)

	for _, conn := range []string{"ext", "builtin"} {
		t.Run(conn, func(t *testing.T) {
			base := bases[conn]
			snapshots := filepath.Join(base, "snapshots")
			name := "pvc-race-" + conn
			createReq := createRequest(name, conn, nil)

			create := func(ctx context.Context) (string, error) {
				resp, err := ctrl.CreateVolume(ctx, createReq)
				return resp.GetVolume().GetVolumeId(), err
			}
			volID := same(t, "CreateVolume", raceSame(t, "CreateVolume", create))
			deleted := false
			t.Cleanup(func() {
				if !deleted {
					ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
					defer cancel()
					_, _ = ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: volID})
				}
			})
			if n := len(volumesIn(t, base)); n != 1 {
				t.Fatalf("%d volumes after 10 racing CreateVolume calls, want 1", n)
			}
			if again, err := create(callCtx(t)); err != nil || again != volID {
				t.Fatalf("CreateVolume once more = %q, %v; want %q", again, err, volID)
			}
			// The same name with an incompatible size is another volume.
			bigger := createRequest(name, conn, nil)
			bigger.CapacityRange = &csi.CapacityRange{RequiredBytes: 1 << 40}
			if _, err := ctrl.CreateVolume(callCtx(t), bigger); status.Code(err) != codes.AlreadyExists {
				t.Errorf("CreateVolume with the same name and another size: %v, want AlreadyExists", err)
			}

			snapReq := &csi.CreateSnapshotRequest{Name: "snap-race-" + conn, SourceVolumeId: volID}
			snapshot := func(ctx context.Context) (string, error) {
				resp, err := ctrl.CreateSnapshot(ctx, snapReq)
				return resp.GetSnapshot().GetSnapshotId(), err
			}
			snapID := same(t, "CreateSnapshot", raceSame(t, "CreateSnapshot", snapshot))
			if n := entries(t, snapshots); n != 1 {
				t.Fatalf("%d snapshot directories after 10 racing CreateSnapshot calls, want 1", n)
			}
			if again, err := snapshot(callCtx(t)); err != nil || again != snapID {
				t.Fatalf("CreateSnapshot once more = %q, %v; want %q", again, err, snapID)
			}

			if testbin.HaveRoot(t, "the node calls need bind mounts") {
				kubelet := filepath.Join(dir, "kubelet", conn)
				staging := filepath.Join(kubelet, "globalmount")
				target := filepath.Join(kubelet, "pods", "p1", "mount")
				for _, d := range []string{staging, filepath.Dir(target)} {
					if err := os.MkdirAll(d, 0o750); err != nil {
						t.Fatal(err)
					}
				}
				cleanupMounts(t, staging, target)
				steps := []struct {
					name          string
					call          func(ctx context.Context) (struct{}, error)
					stage, target int // mounts expected afterwards
				}{
					{"NodeStageVolume", func(ctx context.Context) (struct{}, error) {
						_, err := node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: volID, StagingTargetPath: staging, VolumeCapability: mountCapability()})
						return struct{}{}, err
					}, 1, 0},
					{"NodePublishVolume", func(ctx context.Context) (struct{}, error) {
						_, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: volID, StagingTargetPath: staging, TargetPath: target, VolumeCapability: mountCapability()})
						return struct{}{}, err
					}, 1, 1},
					{"NodeUnpublishVolume", func(ctx context.Context) (struct{}, error) {
						_, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: volID, TargetPath: target})
						return struct{}{}, err
					}, 1, 0},
					{"NodeUnstageVolume", func(ctx context.Context) (struct{}, error) {
						_, err := node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: volID, StagingTargetPath: staging})
						return struct{}{}, err
					}, 0, 0},
				}
				for _, s := range steps {
					raceSame(t, s.name, s.call)
					if _, err := s.call(callCtx(t)); err != nil {
						t.Fatalf("%s once more: %v", s.name, err)
					}
					if got := mounts(t, staging); got != s.stage {
						t.Errorf("after %s: %d mounts on the staging path, want %d", s.name, got, s.stage)
					}
					if got := mounts(t, target); got != s.target {
						t.Errorf("after %s: %d mounts on the target path, want %d", s.name, got, s.target)
					}
				}
				if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("target %s still exists after NodeUnpublishVolume (lstat: %v)", target, err)
				}
			}

			deleteSnap := func(ctx context.Context) (struct{}, error) {
				_, err := ctrl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snapID})
				return struct{}{}, err
			}
			raceSame(t, "DeleteSnapshot", deleteSnap)
			if _, err := deleteSnap(callCtx(t)); err != nil {
				t.Fatalf("DeleteSnapshot once more: %v", err)
			}
			if n := entries(t, snapshots); n != 0 {
				t.Errorf("%d snapshot directories left after DeleteSnapshot", n)
			}

			deleteVol := func(ctx context.Context) (struct{}, error) {
				_, err := ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: volID})
				return struct{}{}, err
			}
			raceSame(t, "DeleteVolume", deleteVol)
			deleted = true
			if _, err := deleteVol(callCtx(t)); err != nil {
				t.Fatalf("DeleteVolume once more: %v", err)
			}
			if n := len(volumesIn(t, base)); n != 0 {
				t.Errorf("%d volumes left after DeleteVolume", n)
			}
		})
	}
}
