package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/democratic-csi/proxy-topology/internal/testbin"
)

// burstFS mounts a fresh ext4 file system under the run's directory and
// release unmounts it; as long as it is mounted the directory is another
// file system, whatever the run's disk is.
func TestBurstFS(t *testing.T) {
	testbin.RequireRoot(t, "burstFS mounts an ext4 image on a loop device")
	dir := t.TempDir()
	base, desc, release := burstFS(dir)
	if base == dir {
		if strings.Contains(desc, "mkfs.ext4") || strings.Contains(desc, "mount") {
			t.Skipf("no fresh file system here: %s", desc)
		}
		t.Fatalf("fell back to the run's directory: %s", desc)
	}
	defer release()
	if fsType, dev := fsOf(base); fsType != "ext4" || !strings.HasPrefix(dev, "/dev/loop") {
		t.Fatalf("%s is %s on %q, want ext4 on a loop device (%s)", base, fsType, dev, desc)
	}
	vol := filepath.Join(base, "hostpath-direct", "data", "volumes", "v1")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	release()
	release() // a second call does nothing
	if _, err := os.Stat(vol); !os.IsNotExist(err) {
		t.Fatalf("after release %s is still there (err %v): not unmounted", vol, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "burstfs.img")); !os.IsNotExist(err) {
		t.Fatalf("the image is left after release: %v", err)
	}
}
