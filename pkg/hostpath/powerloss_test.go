package hostpath

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/democratic-csi/proxy-topology/internal/testbin"
)

// A real power loss on ext4 with a journal, emulated: the file system lives
// on a loop device over an image file, so what its fsyncs (and nothing
// else) sent to the device is in the image, and a copy of the image taken
// right after the creates returned is what a power cut at that moment
// leaves (the journal commit interval is set to 5 minutes, so no
// background commit writes anything meanwhile). Mounted, the copy replays
// its journal and must hold every acknowledged volume (data directory and
// record), and must not hold a directory made after the creates without a
// sync (the control: the copy is not simply everything the page cache
// held).
func TestCreateSurvivesPowerLossOnExt4(t *testing.T) {
	testbin.RequireRoot(t, "the test mounts ext4 images on loop devices")
	for _, tool := range []string{"mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (e2fsprogs, util-linux): %v", tool, err)
		}
	}
	dir := t.TempDir()
	image := filepath.Join(dir, "ext4.img")
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "truncate", "-s", "64M", image)
	run(t, "mkfs.ext4", "-q", "-F", image)
	if out, err := exec.Command("mount", "-o", "loop,commit=300", image, mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount an ext4 image on a loop device here (no loop devices in this container?): %v: %s", err, out)
	}
	t.Cleanup(func() { umount(t, mnt) })

	d, err := New(Options{DriverName: "power.loss.test", NodeID: testNode, BasePath: filepath.Join(mnt, "base"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() }) // before the unmount: it holds a lock file

	// 16 concurrent creates, then 8 one at a time.
	type created struct{ id, name string }
	var (
		mu   sync.Mutex
		acks []created
		wg   sync.WaitGroup
	)
	create := func(name string) {
		vol := createVol(t, d, name, map[string]string{"k": name})
		mu.Lock()
		acks = append(acks, created{volumeIDOf(vol.GetVolumeId()), name})
		mu.Unlock()
	}
	for i := range 16 {
		wg.Add(1)
		go func() { defer wg.Done(); create(fmt.Sprintf("concurrent-%d", i)) }()
	}
	wg.Wait()
	for i := range 8 {
		create(fmt.Sprintf("serial-%d", i))
	}
	// The control: made after the last create, never synced.
	if err := os.Mkdir(filepath.Join(mnt, "base", "volumes", "unsynced"), 0o750); err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, "cut.img")
	copyFile(t, image, cut)

	mnt2 := filepath.Join(dir, "after")
	if err := os.Mkdir(mnt2, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "mount", "-o", "loop", cut, mnt2) // replays the journal
	t.Cleanup(func() { umount(t, mnt2) })
	base2 := filepath.Join(mnt2, "base")
	for _, a := range acks {
		if fi, err := os.Stat(filepath.Join(base2, "volumes", a.id)); err != nil || !fi.IsDir() {
			t.Errorf("after the power cut: data of acknowledged volume %s (%s) is missing: %v", a.name, a.id, err)
		}
		var rec volumeRecord
		if err := readJSON(filepath.Join(base2, "meta", "volumes", a.id+".json"), &rec); err != nil || rec.Name != a.name || rec.Parameters["k"] != a.name {
			t.Errorf("after the power cut: record of acknowledged volume %s (%s): %+v, %v", a.name, a.id, rec, err)
		}
	}
	if _, err := os.Stat(filepath.Join(base2, "volumes", "unsynced")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after the power cut: the unsynced control directory is there (%v), so the copy is not a power cut: the test proves nothing", err)
	}
	if !t.Failed() {
		t.Logf("%d acknowledged volumes all survived the cut; the unsynced directory did not", len(acks))
	}
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

func umount(t *testing.T, dir string) {
	if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
		t.Errorf("umount %s: %v: %s", dir, err, out)
	}
}

// copyFile copies the image as the loop device wrote it (through the
// backing file's page cache, which holds every write the loop device got).
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
