package hostpath

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

func TestOptionsValidate(t *testing.T) {
	ok := Options{DriverName: "local.hostpath.csi", NodeID: "n", BasePath: "/var/lib/x"}
	tests := []struct {
		name  string
		edit  func(*Options)
		field string // "" = valid
	}{
		{"valid", func(*Options) {}, ""},
		{"no driver name", func(o *Options) { o.DriverName = "" }, "DriverName is required"},
		{"bad driver name", func(o *Options) { o.DriverName = "-bad name" }, "DriverName"},
		{"long driver name", func(o *Options) { o.DriverName = strings.Repeat("a", 64) }, "DriverName"},
		{"no node id", func(o *Options) { o.NodeID = "" }, "NodeID is required"},
		{"long node id", func(o *Options) { o.NodeID = strings.Repeat("n", 129) }, "NodeID is 129 bytes"},
		{"no base path", func(o *Options) { o.BasePath = "" }, "BasePath is required"},
		{"relative base path", func(o *Options) { o.BasePath = "data" }, "BasePath \"data\" must be an absolute path"},
		{"base path with a space", func(o *Options) { o.BasePath = "/var/lib/my data" }, "must not contain a space"},
		{"base path with a backslash", func(o *Options) { o.BasePath = `/var/lib/a\b` }, "must not contain a space"},
		{"negative max volumes", func(o *Options) { o.MaxVolumesPerNode = -1 }, "MaxVolumesPerNode -1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			tc.edit(&o)
			err := o.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Validate() = %v, want an error naming %q", err, tc.field)
			}
			if _, err := New(o); err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("New() = %v, want an error naming %q", err, tc.field)
			}
		})
	}
	// BasePath that is a file cannot be used.
	file := filepath.Join(t.TempDir(), "file")
	testkit.WriteFile(t, file, "", 0o644)
	o := ok
	o.BasePath = file
	if _, err := New(o); err == nil || !strings.Contains(err.Error(), "BasePath") {
		t.Errorf("New with a file as BasePath = %v", err)
	}
}

func TestNewCreatesLayout(t *testing.T) {
	base := filepath.Join(t.TempDir(), "a", "b")
	newTestDriver(t, Options{BasePath: base})
	for _, dir := range []string{"", "volumes", "snapshots", "meta/volumes", "meta/snapshots", "meta/attachments", "tmp"} {
		fi, err := os.Stat(filepath.Join(base, dir))
		if err != nil {
			t.Errorf("%s: %v", dir, err)
			continue
		}
		if !fi.IsDir() || fi.Mode().Perm() != 0o750 {
			t.Errorf("%s: mode %s, want drwxr-x---", dir, fi.Mode())
		}
	}
}

func TestRestartKeepsState(t *testing.T) {
	ctx := context.Background()
	base := filepath.Join(t.TempDir(), "base")
	d1 := newTestDriver(t, Options{BasePath: base, ControllerPublish: true})
	vol := mustCreate(t, d1, createReq("persist", 3<<20))
	testkit.WriteFile(t, filepath.Join(d1.store.volumePath(vol), "f"), "kept", 0o644)
	snap := mustSnapshot(t, d1, "persist-snap", vol)
	if _, err := ctrlPublish(d1, vol, testNode, rwo, false); err != nil {
		t.Fatal(err)
	}
	if _, err := d1.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: vol, CapacityRange: &csi.CapacityRange{RequiredBytes: 4 << 20}}); err != nil {
		t.Fatal(err)
	}
	if err := d1.Close(); err != nil {
		t.Fatal(err)
	}

	d2 := newTestDriver(t, Options{BasePath: base, ControllerPublish: true})
	got, err := d2.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: vol})
	if err != nil {
		t.Fatal(err)
	}
	want := &csi.ControllerGetVolumeResponse{
		Volume: &csi.Volume{VolumeId: vol, CapacityBytes: 4 << 20},
		Status: &csi.ControllerGetVolumeResponse_VolumeStatus{PublishedNodeIds: []string{testNode}},
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("after restart (-want +got):\n%s", diff)
	}
	// CreateVolume with the same name is still idempotent.
	again, err := d2.CreateVolume(ctx, createReq("persist", 3<<20))
	if err != nil || again.Volume.VolumeId != vol {
		t.Errorf("CreateVolume after restart = %v, %v", again, err)
	}
	snaps, err := d2.ListSnapshots(ctx, &csi.ListSnapshotsRequest{})
	if err != nil || len(snaps.Entries) != 1 || snaps.Entries[0].Snapshot.SnapshotId != snap {
		t.Errorf("snapshots after restart = %v, %v", snaps, err)
	}
	if got := readFile(t, filepath.Join(d2.store.volumePath(vol), "f")); got != "kept" {
		t.Errorf("data after restart = %q", got)
	}
}

func TestStaleWorkIsPurged(t *testing.T) {
	base := filepath.Join(t.TempDir(), "base")
	running := newTestDriver(t, Options{BasePath: base})
	runningWork := filepath.Join(running.store.work, "volume-in-progress")
	if err := os.Mkdir(runningWork, 0o700); err != nil {
		t.Fatal(err)
	}
	// A Driver that died: its work directory and an unlocked lock file.
	dead := filepath.Join(base, "tmp", "deadbeef")
	testkit.WriteFile(t, filepath.Join(dead, "volume-x", "data", "half-copied"), "x", 0o644)
	testkit.WriteFile(t, dead+".lock", "", 0o600)
	// One that died while removing its work: no lock file left.
	orphan := filepath.Join(base, "tmp", "0badcafe")
	testkit.WriteFile(t, filepath.Join(orphan, "junk"), "x", 0o644)

	newTestDriver(t, Options{BasePath: base})
	for _, gone := range []string{dead, dead + ".lock", orphan} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("%s survived the purge: %v", gone, err)
		}
	}
	if _, err := os.Stat(runningWork); err != nil {
		t.Errorf("the purge removed the work of a running Driver: %v", err)
	}
}

func TestCreateReplacesDataWithoutRecord(t *testing.T) {
	// A crash between moving data into place and writing the record
	// leaves data nobody can reach; the retried CreateVolume replaces it.
	d := newTestDriver(t, Options{})
	id := handleFor(d, "crashed")
	testkit.WriteFile(t, filepath.Join(d.store.volumePath(volumeIDOf(id)), "stale"), "x", 0o644)
	if got := mustCreate(t, d, createReq("crashed", 0)); got != id {
		t.Fatalf("id = %s, want %s", got, id)
	}
	if _, err := os.Lstat(filepath.Join(d.store.volumePath(volumeIDOf(id)), "stale")); !os.IsNotExist(err) {
		t.Errorf("stale data kept: %v", err)
	}
}

func TestRecordsAreWrittenAtomically(t *testing.T) {
	d := newTestDriver(t, Options{})
	for i := range 5 {
		mustCreate(t, d, createReq("v", int64(i+1)))
		d.ControllerExpandVolume(context.Background(), &csi.ControllerExpandVolumeRequest{
			VolumeId: volumeIDFor("v"), CapacityRange: &csi.CapacityRange{RequiredBytes: int64(100 + i)}})
	}
	compactNow(t, d)
	entries, err := os.ReadDir(d.store.metaDir("volumes"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != volumeIDFor("v")+".json" {
		t.Errorf("meta/volumes = %v, want just the record (no temp files)", entries)
	}
	fi, _ := entries[0].Info()
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("record mode = %s", fi.Mode())
	}
}

func TestCorruptRecord(t *testing.T) {
	d := newTestDriver(t, Options{})
	id := mustCreate(t, d, createReq("v", 0))
	compactNow(t, d)
	testkit.WriteFile(t, d.store.recordPath("volumes", volumeIDOf(id)), "{not json", 0o640)
	d = reopen(t, d)
	_, err := d.ControllerGetVolume(context.Background(), &csi.ControllerGetVolumeRequest{VolumeId: id})
	testkit.WantCode(t, err, codes.Internal, volumeIDOf(id)+".json is corrupt")
	_, err = d.ListVolumes(context.Background(), &csi.ListVolumesRequest{})
	testkit.WantCode(t, err, codes.Internal, "corrupt")
}
