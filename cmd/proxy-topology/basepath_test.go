package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
)

// TestBasePathChangeThroughTheProxy: a local-hostpath connection's
// shareBasePath is changed while it holds a volume (a real volume left
// behind under the old path). delete-volume through the proxy fails with
// FAILED_PRECONDITION naming both paths, where it used to say "deleted",
// and the volume stays; check warns about the connection; set back,
// the volume is deleted.
func TestBasePathChangeThroughTheProxy(t *testing.T) {
	data := t.TempDir()
	oldBase, newBase := filepath.Join(data, "local"), filepath.Join(data, "local-new")
	conn := func(base string) string {
		return "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: " + base + "\n"
	}
	s := startServe(t, localHostpathMain, map[string]string{"local": conn(oldBase)})
	code, out, errOut := runCSI(t, s.Endpoint, "create-volume", "--name", "pvc-1", "--param", "connection=local")
	if code != 0 {
		t.Fatalf("create-volume: exit %d\n%s%s", code, out, errOut)
	}
	id := strings.Fields(strings.SplitN(out, "\n", 2)[0])[2]
	if !strings.HasPrefix(id, "v:local/vol-") {
		t.Fatalf("volume id %q from %q", id, out)
	}
	// Recorded under the old base path (an empty volume's directory is
	// made at first use).
	volID := hostpath.VolumeDir(strings.TrimPrefix(id, "v:local/"))
	recorded := func() bool {
		vols, err := hostpath.VolumesAt(oldBase)
		if err != nil {
			t.Fatal(err)
		}
		_, ok := vols[volID]
		return ok
	}
	if !recorded() {
		t.Fatalf("volume %s is not recorded under %s", id, oldBase)
	}

	// A new file, written as an admin would; the store sees the change on
	// the next call (a new inode), as it does for any edit.
	writeConn := func(base string) {
		testkit.ReplaceFile(t, filepath.Join(s.Folder, "local.yaml"), conn(base), 0o600)
	}
	writeConn(newBase)
	want := `FAILED_PRECONDITION: connection "local": volume ` + strings.TrimPrefix(id, "v:local/") + " was made under base path " + oldBase
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, out, errOut = runCSI(t, s.Endpoint, "delete-volume", "--volume", id)
		if code == 1 && strings.Contains(errOut, want) && strings.Contains(errOut, "not under this driver's base path "+newBase) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("delete-volume after the base path change: exit %d, want 1 and %q naming %s\n%s%s", code, want, newBase, out, errOut)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !recorded() {
		t.Errorf("the volume under the old base path is gone")
	}

	code, out, _ = runArgs("check", "--config", filepath.Join(filepath.Dir(s.Folder), "proxy.yaml"), "--csi-endpoint", "unix:///run/own.sock")
	wantWarn := "local-hostpath.shareBasePath " + newBase + " is another base path (fingerprint "
	if code != 0 || !strings.Contains(out, wantWarn) || !strings.Contains(out, "while "+oldBase+" next to it holds 1 volume of connection \"local\"") {
		t.Errorf("check: exit %d, want 0 and %q …\n%s", code, wantWarn, out)
	}

	writeConn(oldBase)
	deadline = time.Now().Add(10 * time.Second)
	for {
		if code, out, errOut = runCSI(t, s.Endpoint, "delete-volume", "--volume", id); code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("delete-volume with the base path set back: exit %d\n%s%s", code, out, errOut)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if recorded() {
		t.Errorf("the volume is still recorded after delete-volume")
	}
}
