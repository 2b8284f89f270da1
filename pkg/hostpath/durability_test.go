package hostpath

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

// These tests prove the ordering that power-loss durability rests on
// (docs/reliability.md §10), which a kill -9 test cannot: the page cache
// survives a killed process, so only the order of renames and syncs, seen
// here through the store's trace, says what a power loss can leave.

// recorder collects the store's trace: "op path" lines in order.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) trace(op, path string) { r.add(op + " " + path) }

func (r *recorder) add(ev string) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	return out
}

// index returns the position of the first event equal to ev, or -1.
func index(events []string, ev string) int { return slices.Index(events, ev) }

// indexPrefix returns the position of the first event starting with p.
func indexPrefix(events []string, p string) int {
	return slices.IndexFunc(events, func(e string) bool { return strings.HasPrefix(e, p) })
}

// tracedDriver returns a driver whose syncs are traced.
func tracedDriver(t *testing.T) (*Driver, *recorder) {
	d := newTestDriver(t, Options{})
	r := &recorder{}
	d.store.sync.trace = r.trace
	return d, r
}

func createVol(t *testing.T, d *Driver, name string, params map[string]string) *csi.Volume {
	t.Helper()
	resp, err := d.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name:               name,
		VolumeCapabilities: []*csi.VolumeCapability{testkit.MountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)},
		CapacityRange:      &csi.CapacityRange{RequiredBytes: 5 << 20},
		Parameters:         params,
	})
	if err != nil {
		t.Fatalf("CreateVolume %s: %v", name, err)
	}
	return resp.GetVolume()
}

// A create renames the data into place before the record, and after both
// renames, before it returns, syncs the record file, the new data
// directory and both parents: 4 fsyncs.
func TestCreateVolumeSyncOrder(t *testing.T) {
	d, r := tracedDriver(t)
	vol := createVol(t, d, "order", map[string]string{"k": "v"})
	ev := r.take()
	id := volumeIDOf(vol.GetVolumeId())
	data := d.store.volumePath(volumeIDOf(id))
	record := d.store.recordPath("volumes", volumeIDOf(id))
	renData, renRec := index(ev, "rename "+data), index(ev, "rename "+record)
	if renData < 0 || renRec < 0 || renData > renRec {
		t.Fatalf("want the data renamed into place before the record; events:\n%s", strings.Join(ev, "\n"))
	}
	want := []string{
		"fsync " + filepath.Join(d.store.metaDir("volumes"), "."+id+".json."), // the record file (its temporary name)
		"fsync " + data,
		"fsync " + d.store.volumesDir(),
		"fsync " + d.store.metaDir("volumes"),
	}
	for _, w := range want {
		i := indexPrefix(ev, w)
		if i < 0 || i < renRec {
			t.Errorf("want %q after the record's rename (at %d), got index %d; events:\n%s", w, renRec, i, strings.Join(ev, "\n"))
		}
	}
	if n := len(slices.DeleteFunc(slices.Clone(ev), func(e string) bool { return !strings.HasPrefix(e, "fsync ") })); n != len(want) {
		t.Errorf("want %d fsyncs for one create, got %d:\n%s", len(want), n, strings.Join(ev, "\n"))
	}
	// The record is complete on disk, parameters included.
	rec, err := d.store.readVolume(volumeIDOf(id))
	if err != nil || rec.Parameters["k"] != "v" || rec.CapacityBytes != 5<<20 {
		t.Errorf("record = %+v, %v", rec, err)
	}
}

// A delete syncs nothing, and removes the record before the data.
func TestDeleteVolumeSyncsNothing(t *testing.T) {
	d, r := tracedDriver(t)
	vol := createVol(t, d, "del", nil)
	r.take()
	if _, err := d.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: vol.GetVolumeId()}); err != nil {
		t.Fatal(err)
	}
	ev := r.take()
	for _, e := range ev {
		if strings.HasPrefix(e, "fsync") || strings.HasPrefix(e, "syncfs") {
			t.Errorf("DeleteVolume synced: %s", e)
		}
	}
	if _, err := os.Lstat(d.store.recordPath("volumes", volumeIDOf(vol.GetVolumeId()))); !os.IsNotExist(err) {
		t.Errorf("record still there: %v", err)
	}
	if _, err := os.Lstat(d.store.volumePath(volumeIDOf(vol.GetVolumeId()))); !os.IsNotExist(err) {
		t.Errorf("data still there: %v", err)
	}
}

// Replacing an acknowledged record (an expansion) syncs the new content
// before the rename, so a power loss leaves the old or the new record.
func TestExpandSyncsBeforeRename(t *testing.T) {
	d, r := tracedDriver(t)
	vol := createVol(t, d, "grow", nil)
	r.take()
	if _, err := d.ControllerExpandVolume(context.Background(), &csi.ControllerExpandVolumeRequest{
		VolumeId: vol.GetVolumeId(), CapacityRange: &csi.CapacityRange{RequiredBytes: 9 << 20},
	}); err != nil {
		t.Fatal(err)
	}
	ev := r.take()
	record := d.store.recordPath("volumes", volumeIDOf(vol.GetVolumeId()))
	fs, ren := indexPrefix(ev, "fsync "+filepath.Join(d.store.metaDir("volumes"), ".")), index(ev, "rename "+record)
	dir := index(ev, "fsync "+d.store.metaDir("volumes"))
	if fs < 0 || ren < 0 || dir < 0 || !(fs < ren && ren < dir) {
		t.Errorf("want fsync(file) < rename < fsync(dir); events:\n%s", strings.Join(ev, "\n"))
	}
}

// A clone syncs the copied tree before it is renamed into place.
func TestCloneSyncsCopyBeforePublishing(t *testing.T) {
	d, r := tracedDriver(t)
	src := createVol(t, d, "src", nil)
	testkit.WriteFile(t, filepath.Join(d.store.volumePath(volumeIDOf(src.GetVolumeId())), "f"), "data", 0o644)
	r.take()
	resp, err := d.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name:               "clone",
		VolumeCapabilities: []*csi.VolumeCapability{testkit.MountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
			Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: src.GetVolumeId()},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ev := r.take()
	sfs, ren := indexPrefix(ev, "synctree "), index(ev, "rename "+d.store.volumePath(volumeIDOf(resp.GetVolume().GetVolumeId())))
	if sfs < 0 || ren < 0 || sfs > ren {
		t.Errorf("want the copy synced before the clone's rename; events:\n%s", strings.Join(ev, "\n"))
	}
}

// A create's four syncs run at once: each waits in the trace until all
// four have started, which syncs run in turn would never do.
func TestCreateSyncsRunAtOnce(t *testing.T) {
	d := newTestDriver(t, Options{})
	const syncs = 4
	var mu sync.Mutex
	started := 0
	all := make(chan struct{})
	d.store.sync.trace = func(op, _ string) {
		if op != "fsync" {
			return
		}
		mu.Lock()
		started++
		n := started
		if n == syncs {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-time.After(5 * time.Second):
			t.Errorf("a sync waited 5s for the others to start: %d of %d had started when it did", n, syncs)
		}
	}
	createVol(t, d, "at-once", nil)
	mu.Lock()
	defer mu.Unlock()
	if started != syncs {
		t.Errorf("want %d syncs, got %d", syncs, started)
	}
}

// Concurrent creates each return only after their own record file, new
// directory and both parents were synced after their renames.
func TestConcurrentCreatesSyncBeforeReturn(t *testing.T) {
	d, r := tracedDriver(t)
	const n = 16
	var wg sync.WaitGroup
	ids := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			vol := createVol(t, d, fmt.Sprintf("concurrent-%d", i), nil)
			ids[i] = vol.GetVolumeId()
			r.add("return " + vol.GetVolumeId())
		}()
	}
	wg.Wait()
	ev := r.take()
	for _, id := range ids {
		ret := index(ev, "return "+id)
		renRec := index(ev, "rename "+d.store.recordPath("volumes", volumeIDOf(id)))
		file := indexPrefix(ev, "fsync "+filepath.Join(d.store.metaDir("volumes"), "."+volumeIDOf(id)+".json."))
		dir := index(ev, "fsync "+d.store.volumePath(volumeIDOf(id)))
		if renRec < 0 || file < renRec || dir < renRec || file > ret || dir > ret {
			t.Errorf("%s: record renamed at %d, record synced at %d, directory synced at %d, returned at %d; want both syncs between rename and return", id, renRec, file, dir, ret)
			continue
		}
		for _, parent := range []string{d.store.volumesDir(), d.store.metaDir("volumes")} {
			synced := false
			for i := renRec; i < ret; i++ {
				synced = synced || ev[i] == "fsync "+parent
			}
			if !synced {
				t.Errorf("%s returned before a sync of %s after its renames", id, parent)
			}
		}
	}
}

// A new Driver cleans up what interrupted creates and deletes leave.
func TestRecoverLeftovers(t *testing.T) {
	base := filepath.Join(t.TempDir(), "base")
	d := newTestDriver(t, Options{BasePath: base})
	kept := volumeIDOf(createVol(t, d, "kept", nil).GetVolumeId())
	s := d.store
	noData := volumeIDFor("record-without-data")
	testkit.WriteFile(t, s.recordPath("volumes", noData), `{"id":"`+noData+`","name":"record-without-data"}`, 0o640)
	empty := volumeIDFor("empty-record")
	testkit.WriteFile(t, s.recordPath("volumes", empty), "", 0o640)
	if err := os.Mkdir(s.volumePath(empty), 0o750); err != nil {
		t.Fatal(err)
	}
	orphan := volumeIDFor("data-without-record")
	if err := os.Mkdir(s.volumePath(orphan), 0o750); err != nil {
		t.Fatal(err)
	}
	tmpRec := filepath.Join(s.metaDir("volumes"), "."+orphan+".json.123.tmp")
	testkit.WriteFile(t, tmpRec, "{", 0o640)
	// A Driver that was killed: its work and lock stay.
	dead := filepath.Join(s.tmpDir(), "deadbeefdeadbeef")
	if err := os.MkdirAll(filepath.Join(dead, "volume-x-1"), 0o750); err != nil {
		t.Fatal(err)
	}
	testkit.WriteFile(t, dead+".lock", "", 0o640)

	// With another live Driver (d) on the base path, data without a record
	// may be a create between its renames: it stays.
	other := newTestDriver(t, Options{BasePath: base})
	if _, err := os.Lstat(s.volumePath(orphan)); err != nil {
		t.Errorf("data without a record removed while another Driver is alive: %v", err)
	}
	for _, gone := range []string{s.recordPath("volumes", noData), s.recordPath("volumes", empty), dead} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("%s not removed: %v", gone, err)
		}
	}
	other.Close()
	d.Close()

	// Alone, it goes, with the temporary record file.
	d2 := newTestDriver(t, Options{BasePath: base})
	for _, gone := range []string{s.volumePath(orphan), s.volumePath(empty), tmpRec} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("%s not removed: %v", gone, err)
		}
	}
	if _, err := d2.store.readVolume(kept); err != nil {
		t.Errorf("a complete volume did not survive recovery: %v", err)
	}
	if _, err := os.Lstat(d2.store.volumePath(kept)); err != nil {
		t.Errorf("a complete volume's data did not survive recovery: %v", err)
	}
}
