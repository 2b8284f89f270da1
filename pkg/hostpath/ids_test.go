package hostpath

import (
	"context"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

func TestIDs(t *testing.T) {
	if first, again := volumeIDFor("pvc-1"), volumeIDFor("pvc-1"); first != again {
		t.Error("volume IDs are not deterministic")
	}
	if volumeIDFor("pvc-1") == volumeIDFor("pvc-2") {
		t.Error("different names share an ID")
	}
	for _, id := range []string{volumeIDFor(""), volumeIDFor(strings.Repeat("x", 1000)), volumeIDFor("../../etc")} {
		if !validVolumeID(id) || validSnapshotID(id) {
			t.Errorf("volume id %q: valid volume %t, valid snapshot %t", id, validVolumeID(id), validSnapshotID(id))
		}
	}
	if s := snapshotIDFor("n"); !validSnapshotID(s) || validVolumeID(s) || strings.TrimPrefix(s, "snap-") != strings.TrimPrefix(volumeIDFor("n"), "vol-") {
		t.Errorf("snapshot id %q", s)
	}
}

// hostileIDs are IDs a broken or malicious CO could send; none may become a
// path outside BasePath.
var hostileIDs = []string{
	"..", ".", "/", "/etc", "../x", "../../victim",
	"vol-../../victim", "vol-../../../victim/file", "snap-../../victim",
	"vol-" + strings.Repeat("a", 32) + "/../../../victim",
	"vol-" + strings.Repeat("a", 31), // one digit short
	"vol-" + strings.Repeat("A", 32), // upper case
	"vol-" + strings.Repeat("a", 32) + "\x00",
	"vol-" + strings.Repeat("a", 32) + "\n",
	"snap-" + strings.Repeat("g", 32),
}

// TestHostileIDsStayInside sends every hostile ID through every RPC that
// takes an ID and checks the answer and that nothing outside BasePath
// changed.
func TestHostileIDsStayInside(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	testkit.WriteFile(t, filepath.Join(root, "victim", "file"), "precious", 0o644)
	testkit.WriteFile(t, filepath.Join(root, "x"), "precious too", 0o644)
	d := newTestDriver(t, Options{BasePath: filepath.Join(root, "base"), Stage: true, ControllerPublish: true})
	real := mustCreate(t, d, createReq("real", 0))
	before := listTree(t, root)

	target := filepath.Join(t.TempDir(), "target")
	calls := []struct {
		name string
		code codes.Code
		call func(id string) error
	}{
		{"DeleteVolume", codes.OK, func(id string) error {
			_, err := d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
			return err
		}},
		{"DeleteSnapshot", codes.OK, func(id string) error {
			_, err := d.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: id})
			return err
		}},
		{"ControllerUnpublishVolume", codes.OK, func(id string) error {
			_, err := d.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: testNode})
			return err
		}},
		{"ControllerGetVolume", codes.NotFound, func(id string) error {
			_, err := d.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: id})
			return err
		}},
		{"ControllerGetVolumeHealth", codes.NotFound, func(id string) error {
			_, err := d.ControllerGetVolumeHealth(ctx, &csi.ControllerGetVolumeHealthRequest{VolumeId: id})
			return err
		}},
		{"ValidateVolumeCapabilities", codes.NotFound, func(id string) error {
			_, err := d.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: []*csi.VolumeCapability{rwo}})
			return err
		}},
		{"ControllerExpandVolume", codes.NotFound, func(id string) error {
			_, err := d.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 1}})
			return err
		}},
		{"ControllerPublishVolume", codes.NotFound, func(id string) error {
			_, err := ctrlPublish(d, id, testNode, rwo, false)
			return err
		}},
		{"CreateSnapshot source", codes.NotFound, func(id string) error {
			_, err := d.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s-" + id, SourceVolumeId: id})
			return err
		}},
		{"GetSnapshot", codes.NotFound, func(id string) error {
			_, err := d.GetSnapshot(ctx, &csi.GetSnapshotRequest{SnapshotId: id})
			return err
		}},
		{"CreateVolume from volume", codes.NotFound, func(id string) error {
			_, err := d.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "c-" + id, VolumeCapabilities: []*csi.VolumeCapability{rwo},
				VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}}})
			return err
		}},
		{"CreateVolume from snapshot", codes.NotFound, func(id string) error {
			_, err := d.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "r-" + id, VolumeCapabilities: []*csi.VolumeCapability{rwo},
				VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: id}}}})
			return err
		}},
		{"NodeStageVolume", codes.NotFound, func(id string) error {
			_, err := d.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: target, VolumeCapability: rwo})
			return err
		}},
		{"NodePublishVolume", codes.NotFound, func(id string) error { return publish(d, id, target, target, rwo, false) }},
		{"NodeGetVolumeStats", codes.NotFound, func(id string) error {
			_, err := d.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: d.store.volumePath(volumeIDOf(real))})
			return err
		}},
		{"NodeExpandVolume", codes.NotFound, func(id string) error {
			_, err := d.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: d.store.volumePath(volumeIDOf(real))})
			return err
		}},
		{"NodeGetVolumeHealth", codes.NotFound, func(id string) error {
			_, err := d.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: id})
			return err
		}},
		{"ListVolumes token", codes.Aborted, func(id string) error {
			_, err := d.ListVolumes(ctx, &csi.ListVolumesRequest{StartingToken: id})
			return err
		}},
		{"ListSnapshots token", codes.Aborted, func(id string) error {
			_, err := d.ListSnapshots(ctx, &csi.ListSnapshotsRequest{StartingToken: id})
			return err
		}},
		{"ListSnapshots filter", codes.OK, func(id string) error {
			resp, err := d.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SnapshotId: id})
			if err == nil && len(resp.Entries) > 0 {
				t.Errorf("ListSnapshots(%q) returned entries", id)
			}
			return err
		}},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			for _, id := range hostileIDs {
				err := c.call(id)
				if c.code == codes.OK {
					if err != nil {
						t.Errorf("%q: %v", id, err)
					}
					continue
				}
				if err == nil {
					t.Errorf("%q: no error, want %s", id, c.code)
					continue
				}
				testkit.WantCode(t, err, c.code)
			}
		})
	}
	if diff := cmp.Diff(before, listTree(t, root)); diff != "" {
		t.Errorf("files outside the driver's records changed (-before +after):\n%s", diff)
	}
}

// listTree lists root outside BasePath's work area (which churns with every
// call) as path -> content.
func listTree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == filepath.Join("base", "tmp") {
			return filepath.SkipDir
		}
		if de.Type().IsRegular() && !strings.Contains(rel, filepath.Join("base", "meta")) {
			out[rel] = readFile(t, p)
		} else {
			out[rel] = de.Type().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
