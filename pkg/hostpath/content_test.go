package hostpath

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

// fillTree writes a tree that exercises every kind of entry copyTree
// handles.
func fillTree(t *testing.T, root string) {
	t.Helper()
	testkit.WriteFile(t, filepath.Join(root, "hello.txt"), "hello", 0o644)
	testkit.WriteFile(t, filepath.Join(root, "bin/run.sh"), "#!/bin/sh\n", 0o755)
	testkit.WriteFile(t, filepath.Join(root, "secret"), "s3cr3t", 0o600)
	testkit.WriteFile(t, filepath.Join(root, "deep/er/still/file"), "deep", 0o640)
	testkit.WriteFile(t, filepath.Join(root, "ro/locked"), "locked", 0o444)
	if err := os.Chmod(filepath.Join(root, "ro"), 0o555); err != nil { // copy must still fill it
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "shared"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(filepath.Join(root, "shared"), 0o3775); err != nil { // setgid + sticky
		t.Fatal(err)
	}
	// Symlinks are copied as links, never followed: one points outside the
	// volume, one dangles.
	if err := os.Symlink("/etc/passwd", filepath.Join(root, "passwd-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("nowhere", filepath.Join(root, "dangling")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(root, "fifo"), 0o620); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(root, "hello.txt"), old, old); err != nil {
		t.Fatal(err)
	}
}

// treeEntry is what compareTrees checks for each path.
type treeEntry struct {
	Mode    uint32 // full st_mode: type and permission bits
	Content string // file content or link target
	MTime   int64
}

func snapshotTree(t *testing.T, root string) map[string]treeEntry {
	t.Helper()
	out := map[string]treeEntry{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		e := treeEntry{Mode: st.Mode}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			e.Content = readFile(t, p)
			e.MTime = st.Mtim.Nano()
		case unix.S_IFLNK:
			e.Content, _ = os.Readlink(p)
			e.MTime = st.Mtim.Nano()
		}
		out[rel] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCloneAndRestoreCopyContent(t *testing.T) {
	ctx := context.Background()
	d := newTestDriver(t, Options{})
	src := mustCreate(t, d, createReq("source", 64<<20))
	fillTree(t, d.store.volumePath(volumeIDOf(src)))
	want := snapshotTree(t, d.store.volumePath(volumeIDOf(src)))

	// Clone.
	clone, err := d.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: "clone", VolumeCapabilities: []*csi.VolumeCapability{rwo},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
			Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: src}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	wantClone := &csi.Volume{
		VolumeId: handleFor(d, "clone"), CapacityBytes: 64 << 20, // unset size: the source's
		ContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
			Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: src}}},
	}
	if diff := cmp.Diff(wantClone, clone.Volume, protocmp.Transform()); diff != "" {
		t.Errorf("clone response (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, snapshotTree(t, d.store.volumePath(volumeIDOf(clone.Volume.VolumeId)))); diff != "" {
		t.Errorf("clone content (-source +clone):\n%s", diff)
	}

	// Snapshot, then change the source: the snapshot keeps the old content.
	snap := mustSnapshot(t, d, "snap", src)
	testkit.WriteFile(t, filepath.Join(d.store.volumePath(volumeIDOf(src)), "hello.txt"), "changed", 0o644)

	restored, err := d.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: "restored", VolumeCapabilities: []*csi.VolumeCapability{rwo},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 128 << 20},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := restored.Volume.GetContentSource().GetSnapshot().GetSnapshotId(); got != snap || restored.Volume.CapacityBytes != 128<<20 {
		t.Errorf("restore response = %v", restored.Volume)
	}
	if diff := cmp.Diff(want, snapshotTree(t, d.store.volumePath(volumeIDOf(restored.Volume.VolumeId)))); diff != "" {
		t.Errorf("restored content (-snapshot time +restored):\n%s", diff)
	}

	// Snapshots are independent of their volume.
	if _, err := d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: src}); err != nil {
		t.Fatal(err)
	}
	again := mustCreate(t, d, &csi.CreateVolumeRequest{
		Name: "after-source-deleted", VolumeCapabilities: []*csi.VolumeCapability{rwo},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap}}},
	})
	if got := readFile(t, filepath.Join(d.store.volumePath(volumeIDOf(again)), "hello.txt")); got != "hello" {
		t.Errorf("restored after source deletion: hello.txt = %q", got)
	}
}

func TestCreateFromSourceErrors(t *testing.T) {
	ctx := context.Background()
	d := newTestDriver(t, Options{})
	src := mustCreate(t, d, createReq("src", 100<<20))
	snap := mustSnapshot(t, d, "src-snap", src)
	fromVol := func(id string) *csi.VolumeContentSource {
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}}
	}
	fromSnap := func(id string) *csi.VolumeContentSource {
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: id}}}
	}
	tests := []struct {
		name string
		cr   *csi.CapacityRange
		src  *csi.VolumeContentSource
		code codes.Code
		msg  string
	}{
		{"volume missing", nil, fromVol(volumeIDFor("missing")), codes.NotFound, "volume " + volumeIDFor("missing") + " not found"},
		{"volume id not ours", nil, fromVol("pvc-123"), codes.NotFound, "volume_content_source.volume.volume_id"},
		{"snapshot missing", nil, fromSnap(snapshotIDFor("missing")), codes.NotFound, "snapshot " + snapshotIDFor("missing") + " not found"},
		{"snapshot id not ours", nil, fromSnap("snap-../../etc"), codes.NotFound, "not a local-hostpath snapshot id"},
		{"clone smaller than source", &csi.CapacityRange{RequiredBytes: 50 << 20}, fromVol(src), codes.OutOfRange, "smaller than the 104857600 bytes"},
		{"restore smaller than snapshot", &csi.CapacityRange{RequiredBytes: 50 << 20}, fromSnap(snap), codes.OutOfRange, "snapshot " + snap},
		{"limit smaller than source", &csi.CapacityRange{LimitBytes: 50 << 20}, fromVol(src), codes.OutOfRange, "limit_bytes 52428800"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "new-" + tc.name,
				VolumeCapabilities: []*csi.VolumeCapability{rwo}, CapacityRange: tc.cr, VolumeContentSource: tc.src})
			testkit.WantCode(t, err, tc.code, tc.msg)
			if _, err := d.store.readVolume(volumeIDOf(volumeIDFor("new-" + tc.name))); !os.IsNotExist(err) {
				t.Errorf("a failed create left a record: %v", err)
			}
		})
	}
}

func TestFailedCopyLeavesNothing(t *testing.T) {
	ctx := context.Background()
	d := newTestDriver(t, Options{})
	src := mustCreate(t, d, createReq("src", 0))
	// The copier opens its root with O_NOFOLLOW; a data directory replaced
	// by a symlink makes the copy fail after the work area was populated.
	testkit.WriteFile(t, filepath.Join(d.store.volumePath(volumeIDOf(src)), "a/file"), "x", 0o644)
	real := d.store.volumePath(volumeIDOf(src)) + ".real"
	if err := os.Rename(d.store.volumePath(volumeIDOf(src)), real); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, d.store.volumePath(volumeIDOf(src))); err != nil {
		t.Fatal(err)
	}
	_, err := d.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "broken-clone", VolumeCapabilities: []*csi.VolumeCapability{rwo},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: src}}}})
	testkit.WantCode(t, err, codes.Internal, "copy")
	id := volumeIDFor("broken-clone")
	if _, err := os.Lstat(d.store.volumePath(volumeIDOf(id))); !os.IsNotExist(err) {
		t.Errorf("failed clone left data: %v", err)
	}
	if _, err := d.store.readVolume(volumeIDOf(id)); !os.IsNotExist(err) {
		t.Errorf("failed clone left a record: %v", err)
	}
	if entries, _ := os.ReadDir(d.store.work); len(entries) != 0 {
		t.Errorf("failed clone left work: %v", entries)
	}
}

func TestCopyTreeRefusesSymlinkedDirectories(t *testing.T) {
	// A pod can swap a directory for a symlink at any time; the copier must
	// never descend through it (it would read host files as root).
	src := t.TempDir()
	testkit.WriteFile(t, filepath.Join(src, "real/file"), "x", 0o644)
	outside := t.TempDir()
	testkit.WriteFile(t, filepath.Join(outside, "host-secret"), "secret", 0o600)
	if err := os.Symlink(outside, filepath.Join(src, "sneaky")); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "copy")
	if err := copyTree(context.Background(), src, dst); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(filepath.Join(dst, "sneaky")); err != nil || target != outside {
		t.Errorf("sneaky = %q, %v; want a symlink to %s", target, err, outside)
	}
	if _, err := os.Lstat(filepath.Join(dst, "sneaky", "host-secret")); err == nil {
		fi, _ := os.Lstat(filepath.Join(dst, "sneaky"))
		if fi.Mode()&fs.ModeSymlink == 0 {
			t.Errorf("the copy followed the symlink")
		}
	}
	// The root itself as a symlink is refused outright.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(src, link); err != nil {
		t.Fatal(err)
	}
	if err := copyTree(context.Background(), link, filepath.Join(t.TempDir(), "x")); err == nil {
		t.Errorf("copyTree through a symlinked root succeeded")
	}
}

func TestCopyTreeCancelled(t *testing.T) {
	src := t.TempDir()
	testkit.WriteFile(t, filepath.Join(src, "f"), "x", 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := copyTree(ctx, src, filepath.Join(t.TempDir(), "copy"))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("copyTree with a cancelled context = %v", err)
	}
}
