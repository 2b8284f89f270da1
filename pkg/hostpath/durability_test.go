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

// logEntries decodes every entry of d's journal on disk, in order.
func logEntries(t *testing.T, d *Driver) []*journalEntry {
	t.Helper()
	gens, err := listLogs(d.store.journalDir())
	if err != nil {
		t.Fatal(err)
	}
	var out []*journalEntry
	for _, g := range gens {
		b, err := os.ReadFile(filepath.Join(d.store.journalDir(), logName(g)))
		if err != nil {
			t.Fatal(err)
		}
		if n, bad := decodeEntries(b, func(e *journalEntry) { out = append(out, e) }); n != len(b) || bad {
			t.Fatalf("log %s: %d of %d bytes decode (damaged: %v)", logName(g), n, len(b), bad)
		}
	}
	return out
}

// onlyEvent fails unless ev is exactly one fsync of d's current log.
func onlyLogSync(t *testing.T, d *Driver, what string, ev []string) {
	t.Helper()
	want := "fsync " + d.store.journal.f.Name()
	if len(ev) != 1 || ev[0] != want {
		t.Errorf("%s: want one event, %q; got:\n%s", what, want, strings.Join(ev, "\n"))
	}
}

// An empty volume's create is one journal entry made durable by one
// fdatasync of the log: no directory, no record file, no rename (the
// directory is made at first use, TestCreateVolumeLayout).
func TestCreateVolumeIsOneJournalEntry(t *testing.T) {
	d, r := tracedDriver(t)
	createVol(t, d, "first", nil) // takes the lease, starts a log
	r.take()
	vol := createVol(t, d, "order", map[string]string{"k": "v"})
	onlyLogSync(t, d, "CreateVolume", r.take())
	id := volumeIDOf(vol.GetVolumeId())
	entries := logEntries(t, d)
	last := entries[len(entries)-1]
	if last.Op != opPut || last.ID != id || last.Volume.Parameters["k"] != "v" || last.Volume.CapacityBytes != 5<<20 || !last.Volume.DataOnFirstUse {
		t.Errorf("last journal entry = %+v (%+v), want the put of %s", last, last.Volume, id)
	}
}

// A delete is durable when it returns: its entry is synced, so a power
// loss never brings an acknowledged delete back; a volume whose directory
// was never made needs nothing else.
func TestDeleteVolumeIsDurable(t *testing.T) {
	d, r := tracedDriver(t)
	vol := createVol(t, d, "del", nil)
	r.take()
	if _, err := d.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: vol.GetVolumeId()}); err != nil {
		t.Fatal(err)
	}
	onlyLogSync(t, d, "DeleteVolume", r.take())
	entries := logEntries(t, d)
	if last := entries[len(entries)-1]; last.Op != opDelete || last.ID != volumeIDOf(vol.GetVolumeId()) {
		t.Errorf("last journal entry = %+v, want the delete", last)
	}
	if _, err := d.store.readVolume(volumeIDOf(vol.GetVolumeId())); !os.IsNotExist(err) {
		t.Errorf("record still there: %v", err)
	}
	// Deleting it again changes nothing and syncs nothing.
	if _, err := d.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: vol.GetVolumeId()}); err != nil {
		t.Fatal(err)
	}
	if ev := r.take(); len(ev) != 0 {
		t.Errorf("a second delete did: %v", ev)
	}
}

// An expansion is a new put of the whole record, synced before it returns.
func TestExpandIsJournalled(t *testing.T) {
	d, r := tracedDriver(t)
	vol := createVol(t, d, "grow", nil)
	r.take()
	if _, err := d.ControllerExpandVolume(context.Background(), &csi.ControllerExpandVolumeRequest{
		VolumeId: vol.GetVolumeId(), CapacityRange: &csi.CapacityRange{RequiredBytes: 9 << 20},
	}); err != nil {
		t.Fatal(err)
	}
	onlyLogSync(t, d, "ControllerExpandVolume", r.take())
	entries := logEntries(t, d)
	if last := entries[len(entries)-1]; last.Op != opPut || last.Volume.CapacityBytes != 9<<20 || last.Volume.Name != "grow" {
		t.Errorf("last journal entry = %+v, want the put with 9 MiB", last)
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

// Group commit: creates that append while a sync of the log runs wait for
// it to end and then share one sync, led by the first of them. The first
// sync is held until 15 more creates have appended: none of those may
// return before the second sync, and 16 creates take 2 syncs.
func TestGroupCommit(t *testing.T) {
	d := newTestDriver(t, Options{})
	createVol(t, d, "warm-up", nil)
	const n = 16
	var (
		mu       sync.Mutex
		syncs    int
		appended int
		returned int
		early    []string
	)
	all := make(chan struct{})
	hook := func(point string) {
		if point != "journal-appended" {
			return
		}
		mu.Lock()
		appended++
		if appended == n {
			close(all)
		}
		mu.Unlock()
	}
	testHook.Store(&hook)
	t.Cleanup(func() { testHook.Store(nil) })
	log := d.store.journal.f.Name()
	d.store.sync.trace = func(op, path string) {
		if op != "fsync" || path != log {
			return
		}
		mu.Lock()
		syncs++
		first := syncs == 1
		mu.Unlock()
		if first {
			select {
			case <-all:
			case <-time.After(10 * time.Second):
				t.Errorf("the other creates did not append within 10s while the first sync was held")
			}
			time.Sleep(20 * time.Millisecond) // give a wrong implementation time to return early
			mu.Lock()
			if returned > 0 {
				early = append(early, fmt.Sprintf("%d creates returned while the sync of the first was still held", returned))
			}
			mu.Unlock()
		}
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			createVol(t, d, fmt.Sprintf("group-%d", i), nil)
			mu.Lock()
			returned++
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, e := range early {
		t.Error(e)
	}
	if syncs != 2 {
		t.Errorf("%d creates took %d syncs of the log, want 2 (the held one and one shared by the %d appended meanwhile)", n, syncs, n-1)
	}
	entries := logEntries(t, d)
	if len(entries) != n+1 {
		t.Errorf("the log holds %d entries, want %d", len(entries), n+1)
	}
}

// A new Driver cleans up what interrupted creates and deletes leave, and
// replays the journal a writer that died left.
func TestRecoverLeftovers(t *testing.T) {
	base := filepath.Join(t.TempDir(), "base")
	d := newTestDriver(t, Options{BasePath: base})
	kept := volumeIDOf(createVol(t, d, "kept", nil).GetVolumeId())
	gone := volumeIDOf(createVol(t, d, "deleted", nil).GetVolumeId())
	if _, err := d.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: gone}); err != nil {
		t.Fatal(err)
	}
	s := d.store
	empty := volumeIDFor("empty-record")
	testkit.WriteFile(t, s.recordPath("volumes", empty), "", 0o640)
	if err := os.Mkdir(s.volumePath(empty), 0o750); err != nil {
		t.Fatal(err)
	}
	orphan := volumeIDFor("data-without-record")
	if err := os.Mkdir(s.volumePath(orphan), 0o750); err != nil {
		t.Fatal(err)
	}
	snapNoData := snapshotIDFor("snapshot-record-without-data")
	testkit.WriteFile(t, s.recordPath("snapshots", snapNoData), `{"id":"`+snapNoData+`","name":"x"}`, 0o640)
	tmpRec := filepath.Join(s.metaDir("volumes"), "."+orphan+".json.123.tmp")
	testkit.WriteFile(t, tmpRec, "{", 0o640)
	// A Driver that was killed: its work and lock stay.
	dead := filepath.Join(s.tmpDir(), "deadbeefdeadbeef")
	if err := os.MkdirAll(filepath.Join(dead, "volume-x-1"), 0o750); err != nil {
		t.Fatal(err)
	}
	testkit.WriteFile(t, dead+".lock", "", 0o640)

	// With another live Driver (d) on the base path, data without a record
	// may be a create between its steps: it stays, and the journal is its
	// writer's.
	other := newTestDriver(t, Options{BasePath: base})
	if _, err := os.Lstat(s.volumePath(orphan)); err != nil {
		t.Errorf("data without a record removed while another Driver is alive: %v", err)
	}
	for _, gone := range []string{s.recordPath("snapshots", snapNoData), dead} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("%s not removed: %v", gone, err)
		}
	}
	if _, err := other.store.readVolume(kept); err != nil {
		t.Errorf("a reader does not see the writer's volume: %v", err)
	}
	other.Close()
	// The writer dies: nothing is compacted, its log stays.
	d.store.journal.f = nil // Close must not sync or compact anything more
	d.Close()

	// Alone, the journal is folded into the records, and the leftovers go.
	d2 := newTestDriver(t, Options{BasePath: base})
	for _, gone := range []string{s.volumePath(orphan), s.volumePath(empty), s.recordPath("volumes", empty), tmpRec, s.recordPath("volumes", gone)} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("%s not removed: %v", gone, err)
		}
	}
	if _, err := d2.store.readVolume(kept); err != nil {
		t.Errorf("a complete volume did not survive recovery: %v", err)
	}
	if _, err := d2.store.readVolume(gone); !os.IsNotExist(err) {
		t.Errorf("a deleted volume came back: %v", err)
	}
	var rec volumeRecord
	if err := readJSON(s.recordPath("volumes", kept), &rec); err != nil || rec.Name != "kept" {
		t.Errorf("the replay did not write the record of the kept volume: %+v, %v", rec, err)
	}
	if gens, _ := listLogs(s.journalDir()); len(gens) != 1 {
		t.Errorf("after the replay the journal has the logs %v, want only the newest", gens)
	}
}
