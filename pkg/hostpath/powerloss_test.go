package hostpath

import (
	"context"
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

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/democratic-csi/proxy-topology/internal/testbin"
)

// A real power loss on ext4 with a journal, emulated: the file system lives
// on a loop device over an image file, so what its fsyncs (and nothing
// else) sent to the device is in the image, and a copy of the image taken
// at a moment is what a power cut then leaves (the journal commit
// interval is set to 5 minutes, so no background commit writes anything
// meanwhile). The cuts are taken right after acknowledged creates,
// deletes and an expansion, at every step of a compaction, and at every
// step of the replay a restart runs. Mounted, each copy replays ext4's
// journal; a Driver opened on it replays the volume journal and must hold
// every acknowledged volume as acknowledged and none whose delete was
// acknowledged. The first copy must not hold a directory made without a
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

	opts := Options{DriverName: "power.loss.test", NodeID: testNode, BasePath: filepath.Join(mnt, "base"), Logger: slog.New(slog.DiscardHandler)}
	d, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			d.Close() // before the unmount: it holds lock files
		}
	})

	// What the callers were told, as of each cut.
	var (
		mu      sync.Mutex
		live    = map[string]ack{} // volume id
		deleted = map[string]bool{}
		cuts    []cut
	)
	snapshot := func(point string) {
		mu.Lock()
		c := cut{point: point, image: filepath.Join(dir, fmt.Sprintf("cut-%d.img", len(cuts))), live: map[string]ack{}, deleted: map[string]bool{}}
		for k, v := range live {
			c.live[k] = v
		}
		for k := range deleted {
			c.deleted[k] = true
		}
		mu.Unlock()
		copyFile(t, image, c.image)
		cuts = append(cuts, c)
	}
	create := func(name string) {
		vol := createVol(t, d, name, map[string]string{"k": name})
		mu.Lock()
		live[volumeIDOf(vol.GetVolumeId())] = ack{name, vol.GetCapacityBytes()}
		mu.Unlock()
	}
	remove := func(id string) {
		if _, err := d.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		delete(live, id)
		deleted[id] = true
		mu.Unlock()
	}

	// 16 concurrent creates, then 8 one at a time, 4 deletes, an expansion.
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() { create(fmt.Sprintf("concurrent-%d", i)) })
	}
	wg.Wait()
	for i := range 8 {
		create(fmt.Sprintf("serial-%d", i))
	}
	for _, n := range []string{"concurrent-0", "concurrent-1", "serial-0", "serial-1"} {
		remove(volumeIDFor(n))
	}
	grown := volumeIDFor("serial-2")
	if _, err := d.ControllerExpandVolume(context.Background(), &csi.ControllerExpandVolumeRequest{
		VolumeId: grown, CapacityRange: &csi.CapacityRange{RequiredBytes: 50 << 20}}); err != nil {
		t.Fatal(err)
	}
	live[grown] = ack{"serial-2", 50 << 20}
	// The control: made after the last acknowledged change, never synced.
	if err := os.Mkdir(filepath.Join(mnt, "base", "volumes", "unsynced"), 0o750); err != nil {
		t.Fatal(err)
	}
	snapshot("after the calls returned")

	// Cuts at every step of a compaction, then more changes in the new log.
	hook := func(point string) { snapshot(point) }
	testHook.Store(&hook)
	compactNow(t, d)
	testHook.Store(nil)
	for i := range 4 {
		create(fmt.Sprintf("after-compaction-%d", i))
	}
	remove(volumeIDFor("serial-3"))
	remove(volumeIDFor("after-compaction-0"))
	snapshot("after changes in the new log")

	// A restart: cuts at every step of its replay.
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	testHook.Store(&hook)
	d, err = New(opts)
	testHook.Store(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(cuts) < 10 {
		t.Fatalf("%d cuts, want one after the calls, four in the compaction, one after the new log, and the replay's", len(cuts))
	}

	for i, c := range cuts {
		mnt2 := filepath.Join(dir, fmt.Sprintf("after-%d", i))
		if err := os.Mkdir(mnt2, 0o755); err != nil {
			t.Fatal(err)
		}
		run(t, "mount", "-o", "loop", c.image, mnt2) // replays ext4's journal
		base2 := filepath.Join(mnt2, "base")
		d2, err := New(Options{DriverName: "power.loss.test", NodeID: testNode, BasePath: base2, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Errorf("cut %d (%s): New: %v", i, c.point, err)
			umount(t, mnt2)
			continue
		}
		for id, a := range c.live {
			rec, err := d2.store.readVolume(id)
			if err != nil || rec.Name != a.name || rec.Parameters["k"] != a.name || rec.CapacityBytes != a.capacity {
				t.Errorf("cut %d (%s): acknowledged volume %s (%s): %+v, %v; want %d bytes", i, c.point, a.name, id, rec, err, a.capacity)
			}
		}
		for id := range c.deleted {
			if _, err := d2.store.readVolume(id); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("cut %d (%s): volume %s came back after its delete was acknowledged: %v", i, c.point, id, err)
			}
		}
		if i == 0 {
			if _, err := os.Stat(filepath.Join(base2, "volumes", "unsynced")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("after the power cut: the unsynced control directory is there (%v), so the copy is not a power cut: the test proves nothing", err)
			}
		}
		d2.Close()
		umount(t, mnt2)
		os.Remove(c.image)
	}
	if !t.Failed() {
		t.Logf("%d power cuts (%s): every acknowledged change survived each, no acknowledged delete came back", len(cuts), cutPoints(cuts))
	}
}

// ack is an acknowledged volume: its name and size.
type ack struct {
	name     string
	capacity int64
}

// cut is one power cut: where it was taken, the image, and what the
// callers had been told by then.
type cut struct {
	point   string
	image   string
	live    map[string]ack
	deleted map[string]bool
}

func cutPoints(cuts []cut) string {
	var p []string
	for _, c := range cuts {
		p = append(p, c.point)
	}
	return strings.Join(p, ", ")
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
