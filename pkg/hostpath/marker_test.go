package hostpath

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

// TestBasePathChangeLeavesNoVolumeForgotten: a connection's base path
// changes while it holds a volume (a real volume left behind under the old
// path). Every call on that volume through the driver on the new path is
// FAILED_PRECONDITION naming both paths — DeleteVolume above all, which
// used to answer OK while the data stayed — and the volume is untouched;
// teardown of the CO's paths still succeeds. The driver on the new path
// warns at start-up, and InspectBasePath (check) finds the volume. Moved
// as a whole, marker included, the old base path serves its volume again.
func TestBasePathChangeLeavesNoVolumeForgotten(t *testing.T) {
	ctx := context.Background()
	parent := t.TempDir()
	oldBase, newBase := filepath.Join(parent, "local"), filepath.Join(parent, "local-new")
	d1 := newTestDriver(t, Options{BasePath: oldBase, Connection: "local"})
	h := mustCreate(t, d1, createReq("pvc-1", 0))
	testkit.WriteFile(t, filepath.Join(d1.store.volumePath(volumeIDOf(h)), "data"), "keep", 0o644)
	if _, fp := splitVolumeHandle(h); fp != fingerprintOf(oldBase) {
		t.Fatalf("handle %s does not carry the fingerprint %s of %s", h, fingerprintOf(oldBase), oldBase)
	}
	d1.Close()

	var logs bytes.Buffer
	d2 := newTestDriver(t, Options{BasePath: newBase, Connection: "local", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "other_base_path="+oldBase) || !strings.Contains(logs.String(), "volumes=1") {
		t.Errorf("start-up on the new base path does not warn about %s:\n%s", oldBase, logs.String())
	}
	want := []string{"volume " + h + " was made under base path " + oldBase + " (fingerprint " + fingerprintOf(oldBase) + "), not under this driver's base path " + newBase + " (fingerprint " + fingerprintOf(newBase) + "): it is still there"}
	_, err := d2.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: h})
	testkit.WantCode(t, err, codes.FailedPrecondition, want...)
	_, err = d2.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: h})
	testkit.WantCode(t, err, codes.FailedPrecondition, want...)
	_, err = d2.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: h, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}})
	testkit.WantCode(t, err, codes.FailedPrecondition, want...)
	_, err = d2.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap", SourceVolumeId: h})
	testkit.WantCode(t, err, codes.FailedPrecondition, want...)
	clone := createReq("clone", 0)
	clone.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: h}}}
	_, err = d2.CreateVolume(ctx, clone)
	testkit.WantCode(t, err, codes.FailedPrecondition, want...)
	_, err = d2.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: h, VolumePath: filepath.Join(parent, "target")})
	testkit.WantCode(t, err, codes.FailedPrecondition, want...)
	testkit.WantCode(t, publish(d2, h, filepath.Join(parent, "target"), "", testkit.MountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), false), codes.FailedPrecondition, want...)
	if _, err := d2.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: h, TargetPath: filepath.Join(parent, "target")}); err != nil {
		t.Errorf("NodeUnpublishVolume of the old volume: %v; teardown must succeed", err)
	}
	if got := readFile(t, filepath.Join(oldBase, "volumes", volumeIDOf(h), "data")); got != "keep" {
		t.Errorf("old volume's data = %q", got)
	}

	for _, tc := range []struct {
		base, connection string
		marked           bool
		elsewhere        int
	}{
		{newBase, "local", true, 1},
		{filepath.Join(parent, "never-opened"), "local", false, 1},
		{newBase, "other", true, 0},
		{oldBase, "local", true, 0},
	} {
		r := InspectBasePath(tc.base, tc.connection)
		if r.Marked != tc.marked || len(r.Elsewhere) != tc.elsewhere || tc.elsewhere > 0 && (r.Elsewhere[0].Path != oldBase || r.Elsewhere[0].Volumes != 1) {
			t.Errorf("InspectBasePath(%s, %s) = %+v; want marked %t, %d other base paths with volumes", tc.base, tc.connection, r, tc.marked, tc.elsewhere)
		}
	}

	// Moved as a whole, the storage keeps its fingerprint and its volumes.
	d2.Close()
	moved := filepath.Join(parent, "moved", "local")
	if err := os.MkdirAll(filepath.Dir(moved), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(oldBase, moved); err != nil {
		t.Fatal(err)
	}
	d3 := newTestDriver(t, Options{BasePath: moved, Connection: "local"})
	if _, err := d3.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: h}); err != nil {
		t.Errorf("ControllerGetVolume after the move: %v", err)
	}
	if _, err := d3.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: h}); err != nil {
		t.Errorf("DeleteVolume after the move: %v", err)
	}
	if _, err := os.Stat(d3.store.volumePath(volumeIDOf(h))); !os.IsNotExist(err) {
		t.Errorf("volume data after DeleteVolume: %v", err)
	}
}

// TestHandlesWithoutFingerprint: a volume made before base path markers
// existed (its record has no fingerprint) keeps its bare handle in every
// answer (a PV carries it, and consumers look it up in ListVolumes) and is
// served and deleted by it; a bare handle of a volume that does not exist
// is deleted as before (nothing can be told about it).
func TestHandlesWithoutFingerprint(t *testing.T) {
	ctx := context.Background()
	d := newTestDriver(t, Options{})
	h := mustCreate(t, d, createReq("old", 0))
	id := volumeIDOf(h)
	compactNow(t, d)
	path := d.store.recordPath("volumes", id)
	var rec map[string]any
	if err := json.Unmarshal([]byte(readFile(t, path)), &rec); err != nil {
		t.Fatal(err)
	}
	delete(rec, "fingerprint")
	data, _ := json.Marshal(rec)
	testkit.WriteFile(t, path, string(data), 0o640)
	d = reopen(t, d)

	list, err := d.ListVolumes(ctx, &csi.ListVolumesRequest{})
	if err != nil || len(list.Entries) != 1 || list.Entries[0].GetVolume().GetVolumeId() != id {
		t.Fatalf("ListVolumes = %v, %v; want the bare id %s", list, err, id)
	}
	if again := mustCreate(t, d, createReq("old", 0)); again != id {
		t.Errorf("CreateVolume retry = %s, want the bare id %s", again, id)
	}
	if _, err := d.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: id}); err != nil {
		t.Errorf("ControllerGetVolume(%s): %v", id, err)
	}
	if _, err := d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Errorf("DeleteVolume(%s): %v", id, err)
	}
	if _, err := os.Stat(d.store.volumePath(id)); !os.IsNotExist(err) {
		t.Errorf("data after DeleteVolume: %v", err)
	}
	if _, err := d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: volumeIDFor("never")}); err != nil {
		t.Errorf("DeleteVolume of a bare id that never existed: %v", err)
	}
}

// TestMarkerWrittenOnce: two drivers opening one new base path agree on
// its marker, and a second opening keeps the first marker's fingerprint
// and connection.
func TestMarkerWrittenOnce(t *testing.T) {
	base := filepath.Join(t.TempDir(), "base")
	a := newTestDriver(t, Options{BasePath: base, Connection: "a"})
	b := newTestDriver(t, Options{BasePath: base, Connection: "b"})
	if *a.marker != *b.marker || a.marker.Connection != "a" || a.marker.BasePath != base {
		t.Errorf("markers %+v and %+v", a.marker, b.marker)
	}
}

// splitVolumeHandle takes the fingerprint off a handle that carries one
// and leaves every other string whole.
func TestSplitVolumeHandle(t *testing.T) {
	id := "vol-" + strings.Repeat("0123456789abcdef", 2)
	for _, tc := range []struct{ handle, id, fp string }{
		{id + "-deadbeef", id, "deadbeef"},
		{id, id, ""},                                         // made before markers
		{id + "-DEADBEEF", id + "-DEADBEEF", ""},             // upper case: not ours
		{id + "-deadbee", id + "-deadbee", ""},               // 7 digits
		{id + "_deadbeef", id + "_deadbeef", ""},             // wrong separator
		{"vol-xyz-deadbeef", "vol-xyz-deadbeef", ""},         // not a volume id
		{id[:35] + "g-deadbeef", id[:35] + "g-deadbeef", ""}, // not hex
	} {
		gotID, gotFP := splitVolumeHandle(tc.handle)
		if gotID != tc.id || gotFP != tc.fp {
			t.Errorf("splitVolumeHandle(%q) = %q, %q; want %q, %q", tc.handle, gotID, gotFP, tc.id, tc.fp)
		}
	}
}
