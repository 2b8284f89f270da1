package hostpath

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/testing/protocmp"
	"k8s.io/mount-utils"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

func publish(d *Driver, id, target, staging string, vc *csi.VolumeCapability, readonly bool) error {
	_, err := d.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{
		VolumeId: id, TargetPath: target, StagingTargetPath: staging, VolumeCapability: vc, Readonly: readonly,
	})
	return err
}

func unpublish(t *testing.T, d *Driver, id, target string) {
	t.Helper()
	if _, err := d.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatalf("NodeUnpublishVolume(%s): %v", target, err)
	}
}

// isMounted returns the topmost mount table entry whose mount point is
// path, or nil. It reads the table itself rather than asking the driver's
// mounter, so that tests check the driver against the kernel's view.
func isMounted(t *testing.T, path string) *mount.MountInfo {
	t.Helper()
	mounts, err := mount.ParseMountInfo("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	p := resolvePath(path)
	for i := len(mounts) - 1; i >= 0; i-- {
		if unescapeMountPath(mounts[i].MountPoint) == p {
			return &mounts[i]
		}
	}
	return nil
}

func TestNodePublishUnpublish(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	d := newTestDriver(t, Options{})
	id := mustCreate(t, d, createReq("pub", 1<<20))
	testkit.WriteFile(t, filepath.Join(d.store.volumePath(volumeIDOf(id)), "hello"), "from the volume", 0o644)
	// The parent of target_path does not exist yet: publish creates both.
	target := filepath.Join(mountDir(t), "pods", "uid", "mount")

	for i := range 2 { // the second publish finds it done
		if err := publish(d, id, target, "", rwo, false); err != nil {
			t.Fatalf("publish #%d: %v", i+1, err)
		}
	}
	if got := readFile(t, filepath.Join(target, "hello")); got != "from the volume" {
		t.Errorf("through the mount: %q", got)
	}
	testkit.WriteFile(t, filepath.Join(target, "written"), "by the pod", 0o644)
	if got := readFile(t, filepath.Join(d.store.volumePath(volumeIDOf(id)), "written")); got != "by the pod" {
		t.Errorf("in the volume: %q", got)
	}
	err := publish(d, id, target, "", rwo, true)
	testkit.WantCode(t, err, codes.AlreadyExists, "readonly=false")

	stats, err := d.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
	if err != nil {
		t.Fatal(err)
	}
	if len(stats.Usage) != 2 || stats.Usage[0].Unit != csi.VolumeUsage_BYTES || stats.Usage[0].Total <= 0 ||
		stats.Usage[1].Unit != csi.VolumeUsage_INODES || stats.Usage[1].Total <= 0 {
		t.Errorf("stats = %v", stats)
	}
	exp, err := d.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: target,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20}})
	if err != nil || exp.CapacityBytes != 1<<20 {
		t.Errorf("NodeExpandVolume = %v, %v", exp, err)
	}
	_, err = d.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: target,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20}})
	testkit.WantCode(t, err, codes.OutOfRange, "ControllerExpandVolume first")
	health, err := d.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: id, VolumePublishPath: target})
	if err != nil || len(health.VolumeHealth.HealthStatuses) != 0 {
		t.Errorf("health while published = %v, %v", health, err)
	}

	// A volume in use cannot be deleted.
	_, err = d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
	testkit.WantCode(t, err, codes.FailedPrecondition, "still mounted at "+target)

	for range 2 { // the second unpublish finds nothing to do
		unpublish(t, d, id, target)
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("target_path still exists: %v", err)
	}
	if got := readFile(t, filepath.Join(d.store.volumePath(volumeIDOf(id)), "written")); got != "by the pod" {
		t.Errorf("data after unpublish: %q", got)
	}
	health, err = d.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: id, VolumePublishPath: target})
	if err != nil || len(health.VolumeHealth.HealthStatuses) != 1 || health.VolumeHealth.HealthStatuses[0].Reason != "NotPublished" {
		t.Errorf("health after unpublish = %v, %v", health, err)
	}
	_, err = d.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
	testkit.WantCode(t, err, codes.NotFound, target)
	if _, err := d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Errorf("DeleteVolume after unpublish: %v", err)
	}
}

func TestNodePublishReadOnly(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name     string
		opts     Options
		vc       *csi.VolumeCapability
		readonly bool
		pubCtx   map[string]string
	}{
		{"readonly flag", Options{}, rwo, true, nil},
		{"reader-only access mode", Options{}, testkit.MountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY), false, nil},
		{"ro mount flag", Options{}, testkit.MountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "ro", "noexec"), false, nil},
		{"controller-published readonly", Options{ControllerPublish: true}, rwo, false, map[string]string{publishContextReadonly: "true"}},
		{"staged, readonly flag", Options{Stage: true}, rwo, true, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			d := newTestDriver(t, tc.opts)
			id := mustCreate(t, d, createReq("ro", 0))
			testkit.WriteFile(t, filepath.Join(d.store.volumePath(volumeIDOf(id)), "file"), "content", 0o644)
			dir := mountDir(t)
			target := filepath.Join(dir, "target")
			var staging string
			if tc.opts.Stage {
				staging = filepath.Join(dir, "staging")
				if _, err := d.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: tc.vc}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					d.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
				})
			}
			_, err := d.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, TargetPath: target,
				StagingTargetPath: staging, VolumeCapability: tc.vc, Readonly: tc.readonly, PublishContext: tc.pubCtx})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { unpublish(t, d, id, target) })

			if got := readFile(t, filepath.Join(target, "file")); got != "content" {
				t.Errorf("read through read-only mount: %q", got)
			}
			err = os.WriteFile(filepath.Join(target, "new"), []byte("x"), 0o644)
			if !errors.Is(err, unix.EROFS) {
				t.Errorf("write through read-only mount: %v, want EROFS", err)
			}
			if m := isMounted(t, target); m == nil || !slices.Contains(m.MountOptions, "ro") {
				t.Errorf("mountinfo of target = %+v, want ro", m)
			}
			// The volume itself stays writable.
			testkit.WriteFile(t, filepath.Join(d.store.volumePath(volumeIDOf(id)), "still-writable"), "x", 0o644)
		})
	}
}

func TestNodePublishMountFlags(t *testing.T) {
	requireRoot(t)
	d := newTestDriver(t, Options{})
	id := mustCreate(t, d, createReq("flags", 0))
	target := filepath.Join(mountDir(t), "target")
	if err := publish(d, id, target, "", testkit.MountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "nosuid", "nodev", "noexec"), false); err != nil {
		t.Fatal(err)
	}
	defer unpublish(t, d, id, target)
	m := isMounted(t, target)
	for _, opt := range []string{"rw", "nosuid", "nodev", "noexec"} {
		if m == nil || !slices.Contains(m.MountOptions, opt) {
			t.Fatalf("mount table entry %+v lacks option %s", m, opt)
		}
	}
}

// TestNodePublishConflicts: what NodePublishVolume refuses, with real bind
// mounts (root) and with mount-utils' FakeMounter injected
// (Options.Mounter): the decisions are the driver's, whichever mounter
// makes the mounts, so they are checked without root too.
func TestNodePublishConflicts(t *testing.T) {
	for _, fake := range []bool{false, true} {
		name := "system mounts"
		if fake {
			name = "FakeMounter"
		}
		t.Run(name, func(t *testing.T) {
			opts := Options{}
			var fm *mount.FakeMounter
			if fake {
				fm = mount.NewFakeMounter(nil)
				opts.Mounter = fm
			} else {
				requireRoot(t)
			}
			nodePublishConflicts(t, opts)
			if fm != nil {
				if mps, _ := fm.List(); len(mps) != 0 {
					t.Errorf("FakeMounter still has mounts after every unpublish: %+v", mps)
				}
				mounts := 0
				for _, a := range fm.GetLog() {
					if a.Action == mount.FakeActionMount {
						mounts++
					}
				}
				if mounts != 3 {
					t.Errorf("%d mounts made through the injected mounter, want 3 (busy, first, and second as a multi-writer)", mounts)
				}
			}
		})
	}
}

func nodePublishConflicts(t *testing.T, opts Options) {
	d := newTestDriver(t, opts)
	vol := mustCreate(t, d, createReq("a", 0))
	other := mustCreate(t, d, createReq("b", 0))
	dir := mountDir(t)

	// target_path already carries another volume.
	busy := filepath.Join(dir, "busy")
	if err := publish(d, other, busy, "", rwo, false); err != nil {
		t.Fatal(err)
	}
	defer unpublish(t, d, other, busy)
	testkit.WantCode(t, publish(d, vol, busy, "", rwo, false), codes.AlreadyExists, "something other than volume "+volumeIDOf(vol))

	// SINGLE_NODE_SINGLE_WRITER allows one target; the other single-node
	// writer modes allow several on the same node.
	snsw := testkit.MountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER)
	first, second := filepath.Join(dir, "first"), filepath.Join(dir, "second")
	if err := publish(d, vol, first, "", snsw, false); err != nil {
		t.Fatal(err)
	}
	defer unpublish(t, d, vol, first)
	if err := publish(d, vol, first, "", snsw, false); err != nil {
		t.Errorf("republishing the same target: %v", err)
	}
	testkit.WantCode(t, publish(d, vol, second, "", snsw, false), codes.FailedPrecondition, "already published at "+first)
	if _, err := os.Lstat(second); !os.IsNotExist(err) {
		t.Errorf("refused publish created its target: %v", err)
	}
	if err := publish(d, vol, second, "", testkit.MountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER), false); err != nil {
		t.Errorf("SINGLE_NODE_MULTI_WRITER at a second target: %v", err)
	}
	unpublish(t, d, vol, second)

	// Something that is not a mount but has content is never deleted.
	notOurs := filepath.Join(dir, "not-ours")
	testkit.WriteFile(t, filepath.Join(notOurs, "precious"), "x", 0o644)
	_, err := d.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: notOurs})
	testkit.WantCode(t, err, codes.FailedPrecondition, "not empty")
	if got := readFile(t, filepath.Join(notOurs, "precious")); got != "x" {
		t.Errorf("content was touched: %q", got)
	}
}

func TestNodeStageMode(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	d := newTestDriver(t, Options{Stage: true})
	id := mustCreate(t, d, createReq("staged", 0))
	testkit.WriteFile(t, filepath.Join(d.store.volumePath(volumeIDOf(id)), "f"), "staged data", 0o644)
	dir := mountDir(t)
	staging := filepath.Join(dir, "globalmount")
	target := filepath.Join(dir, "pod")

	testkit.WantCode(t, publish(d, id, target, "", rwo, false), codes.FailedPrecondition, "staging_target_path is required")
	testkit.WantCode(t, publish(d, id, target, staging, rwo, false), codes.FailedPrecondition, "not staged")

	stage := func() error {
		_, err := d.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: rwo})
		return err
	}
	unstage := func() {
		t.Helper()
		if _, err := d.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if err := stage(); err != nil {
			t.Fatal(err)
		}
	}
	if !isMountOf(staging, d.store.volumePath(volumeIDOf(id))) {
		t.Fatalf("staging path does not show the volume")
	}
	if err := publish(d, id, target, staging, rwo, false); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(target, "f")); got != "staged data" {
		t.Errorf("through the published mount: %q", got)
	}
	// Staging and publishing the same volume is not a second writer.
	if err := publish(d, id, filepath.Join(dir, "pod2"), staging, testkit.MountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER), false); err == nil {
		t.Errorf("SINGLE_NODE_SINGLE_WRITER publish next to an existing target succeeded")
	}
	unpublish(t, d, id, target)
	if err := publish(d, id, filepath.Join(dir, "pod2"), staging, testkit.MountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER), false); err != nil {
		t.Errorf("SINGLE_NODE_SINGLE_WRITER with only the staging mount around: %v", err)
	}
	unpublish(t, d, id, filepath.Join(dir, "pod2"))
	for range 2 {
		unstage()
	}
	if isMounted(t, staging) != nil {
		t.Errorf("staging path still mounted")
	}
	if fi, err := os.Stat(staging); err != nil || !fi.IsDir() {
		t.Errorf("unstage removed the CO's staging directory: %v", err)
	}

	// Another volume on the same staging path is refused.
	other := mustCreate(t, d, createReq("other", 0))
	if err := stage(); err != nil {
		t.Fatal(err)
	}
	defer unstage()
	_, err := d.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: other, StagingTargetPath: staging, VolumeCapability: rwo})
	testkit.WantCode(t, err, codes.AlreadyExists, "something other than volume "+volumeIDOf(other))
}

func TestNodeCapabilitiesAndInfo(t *testing.T) {
	ctx := context.Background()
	rpcs := func(d *Driver) []csi.NodeServiceCapability_RPC_Type {
		resp, err := d.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var out []csi.NodeServiceCapability_RPC_Type
		for _, c := range resp.Capabilities {
			out = append(out, c.GetRpc().GetType())
		}
		return out
	}
	base := []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
		csi.NodeServiceCapability_RPC_GET_STORAGE_HEALTH,
	}
	if diff := cmp.Diff(base, rpcs(newTestDriver(t, Options{}))); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	staged := newTestDriver(t, Options{Stage: true, MaxVolumesPerNode: 7})
	if diff := cmp.Diff(append(base, csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME), rpcs(staged)); diff != "" {
		t.Errorf("Stage (-want +got):\n%s", diff)
	}
	info, err := staged.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&csi.NodeGetInfoResponse{NodeId: testNode, MaxVolumesPerNode: 7}, info, protocmp.Transform()); diff != "" {
		t.Errorf("NodeGetInfo (-want +got):\n%s", diff)
	}
	sh, err := staged.NodeGetStorageHealth(ctx, &csi.NodeGetStorageHealthRequest{})
	if err != nil || len(sh.BackendHealth) != 0 {
		t.Errorf("NodeGetStorageHealth = %v, %v", sh, err)
	}

	// Without Stage the stage RPCs are deliberately unimplemented.
	plain := newTestDriver(t, Options{})
	_, err = plain.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "x", StagingTargetPath: "/x", VolumeCapability: rwo})
	testkit.WantCode(t, err, codes.Unimplemented, "STAGE_UNSTAGE_VOLUME")
	_, err = plain.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "x", StagingTargetPath: "/x"})
	testkit.WantCode(t, err, codes.Unimplemented, "STAGE_UNSTAGE_VOLUME")
}

func TestNodeRequestValidation(t *testing.T) {
	ctx := context.Background()
	d := newTestDriver(t, Options{Stage: true})
	id := mustCreate(t, d, createReq("v", 0))
	abs := filepath.Join(t.TempDir(), "t")
	block := blockCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	multi := testkit.MountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)
	tests := []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"publish: no volume id", func() error { return publish(d, "", abs, abs, rwo, false) }, codes.InvalidArgument, "volume_id"},
		{"publish: no target", func() error { return publish(d, id, "", abs, rwo, false) }, codes.InvalidArgument, "target_path is required"},
		{"publish: relative target", func() error { return publish(d, id, "rel/t", abs, rwo, false) }, codes.InvalidArgument, "absolute"},
		{"publish: no capability", func() error { return publish(d, id, abs, abs, nil, false) }, codes.InvalidArgument, "volume_capability is required"},
		{"publish: block", func() error { return publish(d, id, abs, abs, block, false) }, codes.FailedPrecondition, "block"},
		{"publish: multi-node", func() error { return publish(d, id, abs, abs, multi, false) }, codes.FailedPrecondition, "node-local"},
		{"publish: relative staging", func() error { return publish(d, id, abs, "rel", rwo, false) }, codes.InvalidArgument, "staging_target_path"},
		{"publish: unknown volume", func() error { return publish(d, volumeIDFor("nope"), abs, abs, rwo, false) }, codes.NotFound, "not found"},
		{"stage: no path", func() error {
			_, err := d.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, VolumeCapability: rwo})
			return err
		}, codes.InvalidArgument, "staging_target_path is required"},
		{"stage: no capability", func() error {
			_, err := d.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: abs})
			return err
		}, codes.InvalidArgument, "volume_capability"},
		{"stage: unknown volume", func() error {
			_, err := d.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: volumeIDFor("nope"), StagingTargetPath: abs, VolumeCapability: rwo})
			return err
		}, codes.NotFound, "not found"},
		{"unpublish: no id", func() error {
			_, err := d.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{TargetPath: abs})
			return err
		}, codes.InvalidArgument, "volume_id"},
		{"unpublish: relative target", func() error {
			_, err := d.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: "x"})
			return err
		}, codes.InvalidArgument, "absolute"},
		{"unpublish: unknown volume, nothing there", func() error {
			_, err := d.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "foreign-id", TargetPath: abs})
			return err
		}, codes.OK, ""},
		{"unstage: unknown volume, nothing there", func() error {
			_, err := d.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "foreign-id", StagingTargetPath: abs})
			return err
		}, codes.OK, ""},
		{"stats: no path", func() error {
			_, err := d.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id})
			return err
		}, codes.InvalidArgument, "volume_path"},
		{"stats: relative path", func() error {
			_, err := d.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: "some/path"})
			return err
		}, codes.NotFound, "not an absolute path"},
		{"stats: path is not the volume", func() error {
			_, err := d.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: t.TempDir()})
			return err
		}, codes.NotFound, "not published or staged"},
		{"expand: no path", func() error {
			_, err := d.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id})
			return err
		}, codes.InvalidArgument, "volume_path"},
		{"expand: unknown volume", func() error {
			_, err := d.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: volumeIDFor("nope"), VolumePath: "some/path"})
			return err
		}, codes.NotFound, "not found"},
		{"health: unknown volume", func() error {
			_, err := d.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: volumeIDFor("nope")})
			return err
		}, codes.NotFound, "not found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if tc.code == codes.OK {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			testkit.WantCode(t, err, tc.code, tc.msg)
		})
	}
}
