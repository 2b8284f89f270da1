package hostpath

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/democratic-csi/proxy-topology/internal/testbin"
	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

const testNode = "node-1"

// newTestDriver returns a Driver on a fresh BasePath in t.TempDir(). Fields
// of opts that the tests do not care about get defaults.
func newTestDriver(t *testing.T, opts Options) *Driver {
	t.Helper()
	if opts.DriverName == "" {
		opts.DriverName = "hostpath.test.proxy-topology"
	}
	if opts.NodeID == "" {
		opts.NodeID = testNode
	}
	if opts.BasePath == "" {
		opts.BasePath = filepath.Join(t.TempDir(), "base")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	d, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		d.Close()
		// Volumes may hold read-only directories (as pods make them), which
		// t.TempDir's cleanup cannot remove without root.
		removeTree(opts.BasePath)
	})
	return d
}

// requireRoot skips tests that mount: bind mounts need CAP_SYS_ADMIN. With
// PROXY_TOPOLOGY_REQUIRE_ROOT=1 (make test) it fails them instead.
func requireRoot(t *testing.T) {
	t.Helper()
	testbin.RequireRoot(t, "the test makes real bind mounts")
}

// mountDir returns a temp dir for targets and staging paths and makes sure
// nothing stays mounted below it when the test ends, pass or fail.
func mountDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Cleanup(func() {
		below, err := newMounter(nil).mountsBelow(dir)
		if err != nil {
			t.Error(err)
			return
		}
		for i := len(below) - 1; i >= 0; i-- {
			t.Errorf("test left %s mounted", below[i])
			if err := unix.Unmount(below[i], unix.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", below[i], err)
			}
		}
	})
	return dir
}

func blockCap(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

var rwo = testkit.MountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)

func createReq(name string, required int64) *csi.CreateVolumeRequest {
	req := &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{rwo}}
	if required > 0 {
		req.CapacityRange = &csi.CapacityRange{RequiredBytes: required}
	}
	return req
}

// handleFor is the handle d gives the volume of name: its id and the
// fingerprint of d's base path (marker.go).
func handleFor(d *Driver, name string) string { return volumeIDFor(name) + "-" + d.marker.Fingerprint }

// mustCreate creates a volume and returns its ID.
func mustCreate(t *testing.T, d *Driver, req *csi.CreateVolumeRequest) string {
	t.Helper()
	resp, err := d.CreateVolume(context.Background(), req)
	if err != nil {
		t.Fatalf("CreateVolume(%q): %v", req.GetName(), err)
	}
	return resp.GetVolume().GetVolumeId()
}

func mustSnapshot(t *testing.T, d *Driver, name, volumeID string) string {
	t.Helper()
	resp, err := d.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: volumeID})
	if err != nil {
		t.Fatalf("CreateSnapshot(%q): %v", name, err)
	}
	return resp.GetSnapshot().GetSnapshotId()
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// compactNow retires d's journal log and folds every log before the new
// one into the records folder, as the writer does once a log is full.
func compactNow(t *testing.T, d *Driver) {
	t.Helper()
	s := d.store
	j := &s.journal
	j.mu.Lock()
	if j.f != nil {
		if err := j.startLog(j.gen); err != nil {
			j.mu.Unlock()
			t.Fatal(err)
		}
	}
	for _, f := range j.retired {
		f.Close() // every append returned: synced
	}
	j.retired = nil
	gen := j.gen
	j.mu.Unlock()
	s.compactions.wait()
	if gen == 0 {
		return
	}
	if err := s.compact(gen, false); err != nil {
		t.Fatal(err)
	}
}

// reopen closes d and opens a Driver on its base path again, as a restart
// does: the new one is alone there, so it replays the journal.
func reopen(t *testing.T, d *Driver) *Driver {
	t.Helper()
	opts := d.opts
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d2, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { d2.Close() })
	return d2
}
