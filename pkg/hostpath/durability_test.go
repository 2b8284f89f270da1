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
	// delay, when set, is slept on every fsync of a directory, to make
	// concurrent creates overlap a round.
	delay time.Duration
}

func (r *recorder) trace(op, path string) {
	if op == "fsync" && r.delay > 0 && !strings.Contains(filepath.Base(path), ".json") {
		time.Sleep(r.delay)
	}
	r.add(op + " " + path)
}

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
	id := vol.GetVolumeId()
	data := d.store.volumePath(id)
	record := d.store.recordPath("volumes", id)
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
	rec, err := d.store.readVolume(id)
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
	if _, err := os.Lstat(d.store.recordPath("volumes", vol.GetVolumeId())); !os.IsNotExist(err) {
		t.Errorf("record still there: %v", err)
	}
	if _, err := os.Lstat(d.store.volumePath(vol.GetVolumeId())); !os.IsNotExist(err) {
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
	record := d.store.recordPath("volumes", vol.GetVolumeId())
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
	testkit.WriteFile(t, filepath.Join(d.store.volumePath(src.GetVolumeId()), "f"), "data", 0o644)
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
	sfs, ren := indexPrefix(ev, "synctree "), index(ev, "rename "+d.store.volumePath(resp.GetVolume().GetVolumeId()))
	if sfs < 0 || ren < 0 || sfs > ren {
		t.Errorf("want the copy synced before the clone's rename; events:\n%s", strings.Join(ev, "\n"))
	}
}

// Concurrent creates share rounds: fewer directory syncs than creates,
// and each create returns only after a round that synced its record.
func TestGroupCommitSharesSyncs(t *testing.T) {
	d, r := tracedDriver(t)
	r.delay = 20 * time.Millisecond
	const n = 16
	var wg sync.WaitGroup
	ids := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			vol := createVol(t, d, fmt.Sprintf("group-%d", i), nil)
			ids[i] = vol.GetVolumeId()
			r.add("return " + vol.GetVolumeId())
		}()
	}
	wg.Wait()
	ev := r.take()
	metaSyncs := 0
	for _, e := range ev {
		if e == "fsync "+d.store.metaDir("volumes") {
			metaSyncs++
		}
	}
	if metaSyncs >= n || metaSyncs == 0 {
		t.Errorf("%d syncs of the record directory for %d concurrent creates; want at least one and fewer than %d", metaSyncs, n, n)
	}
	t.Logf("%d concurrent creates: %d rounds", n, metaSyncs)
	for _, id := range ids {
		ret := index(ev, "return "+id)
		file := indexPrefix(ev, "fsync "+filepath.Join(d.store.metaDir("volumes"), "."+id+".json."))
		if file < 0 || file > ret {
			t.Errorf("%s returned (at %d) before its record was synced (at %d)", id, ret, file)
			continue
		}
		// The directory sync that covers it comes after the file sync and
		// before the return.
		covered := false
		for i := file; i < ret; i++ {
			if ev[i] == "fsync "+d.store.metaDir("volumes") {
				covered = true
			}
		}
		if !covered {
			t.Errorf("%s returned before a sync of the record directory after its record", id)
		}
	}
}

// A new Driver cleans up what interrupted creates and deletes leave.
func TestRecoverLeftovers(t *testing.T) {
	base := filepath.Join(t.TempDir(), "base")
	d := newTestDriver(t, Options{BasePath: base})
	kept := createVol(t, d, "kept", nil).GetVolumeId()
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
