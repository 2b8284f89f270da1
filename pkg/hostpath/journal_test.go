package hostpath

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

func testEntry(i int) *journalEntry {
	id := volumeIDFor(fmt.Sprintf("v-%d", i))
	if i%3 == 2 {
		return &journalEntry{Op: opDelete, ID: id}
	}
	return &journalEntry{Op: opPut, ID: id, Volume: &volumeRecord{ID: id, Name: fmt.Sprintf("v-%d", i), CapacityBytes: int64(i), Parameters: map[string]string{"k": strings.Repeat("x", i)}}}
}

// Entries decode as written; a torn tail (any prefix of an entry) stops
// the decoding before it, as "not yet"; a damaged entry stops it as bad.
func TestDecodeEntries(t *testing.T) {
	var log []byte
	var ends []int
	for i := range 20 {
		b, err := encodeEntry(testEntry(i))
		if err != nil {
			t.Fatal(err)
		}
		log = append(log, b...)
		ends = append(ends, len(log))
	}
	var got []*journalEntry
	n, bad := decodeEntries(log, func(e *journalEntry) { got = append(got, e) })
	if n != len(log) || bad || len(got) != 20 || got[7].Volume.Name != "v-7" || got[2].Op != opDelete {
		t.Fatalf("decode = %d of %d bytes, bad %v, %d entries", n, len(log), bad, len(got))
	}
	for cut := ends[9] + 1; cut < ends[10]; cut++ {
		k := 0
		n, bad := decodeEntries(log[:cut], func(*journalEntry) { k++ })
		if n != ends[9] || bad || k != 10 {
			t.Fatalf("torn at %d: %d bytes, bad %v, %d entries; want the first 10 (%d bytes), not bad", cut, n, bad, k, ends[9])
		}
	}
	damaged := bytes.Clone(log)
	damaged[ends[4]+frameHeader+3] ^= 0x20 // a bit of entry 5's JSON
	k := 0
	n, bad = decodeEntries(damaged, func(*journalEntry) { k++ })
	if n != ends[4] || !bad || k != 5 {
		t.Errorf("damaged entry 5: %d bytes, bad %v, %d entries; want 5 entries and bad", n, bad, k)
	}
}

// FuzzDecodeEntries: any bytes decode without a panic into a prefix of
// whole, valid entries, and what decodes encodes back to the same bytes.
func FuzzDecodeEntries(f *testing.F) {
	var log []byte
	for i := range 4 {
		b, _ := encodeEntry(testEntry(i))
		log = append(log, b...)
		f.Add(bytes.Clone(log))
	}
	f.Add(log[:len(log)-3])
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var again []byte
		n, _ := decodeEntries(b, func(e *journalEntry) {
			if !validEntry(e) {
				t.Fatalf("an invalid entry decoded: %+v", e)
			}
			enc, err := encodeEntry(e)
			if err != nil {
				t.Fatal(err)
			}
			again = append(again, enc...)
		})
		if n < 0 || n > len(b) {
			t.Fatalf("decoded %d of %d bytes", n, len(b))
		}
		// Re-encoding may order JSON differently only if the input was not
		// ours; the length of what decoded stays within the input.
		if len(again) == 0 && n != 0 {
			t.Fatalf("%d bytes decoded into no entry", n)
		}
	})
}

// A second Driver on the base path (a node plugin next to the
// controller) reads the writer's changes before each lookup, also after
// the writer compacted the logs it had read.
func TestReaderFollowsTheWriter(t *testing.T) {
	ctx := context.Background()
	w := newTestDriver(t, Options{})
	r := newTestDriver(t, Options{BasePath: w.opts.BasePath})
	a := mustCreate(t, w, createReq("a", 1))
	if _, err := r.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: a}); err != nil {
		t.Fatalf("the reader does not see a create: %v", err)
	}
	if _, err := w.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: a}); err != nil {
		t.Fatal(err)
	}
	_, err := r.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: a})
	testkit.WantCode(t, err, codes.NotFound, "not found")
	b := mustCreate(t, w, createReq("b", 2))
	compactNow(t, w) // the log the reader read is gone
	c := mustCreate(t, w, createReq("c", 3))
	list, err := r.ListVolumes(ctx, &csi.ListVolumesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range list.GetEntries() {
		got[e.GetVolume().GetVolumeId()] = true
	}
	if len(got) != 2 || !got[b] || !got[c] {
		t.Errorf("the reader lists %v after a compaction, want %s and %s", got, b, c)
	}
	// The reader cannot write while the writer lives: the lease is held.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = r.CreateVolume(short, createReq("d", 0))
	testkit.WantCode(t, err, codes.Unavailable, "another driver process holds its volume journal")
	// Once the writer is gone, it can.
	w.Close()
	if got := mustCreate(t, r, createReq("d", 0)); got == "" {
		t.Error("no volume")
	}
	if _, err := r.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: c}); err != nil {
		t.Errorf("the new writer lost the old writer's volume: %v", err)
	}
}

// A failed sync fails the calls it covered, leaves no trace of them in
// the log or the index, and the journal goes on.
func TestFailedSyncLeavesNothing(t *testing.T) {
	d := newTestDriver(t, Options{})
	mustCreate(t, d, createReq("before", 0))
	var mu sync.Mutex
	failing := true
	d.store.sync.fail = func(path string) error {
		mu.Lock()
		defer mu.Unlock()
		if failing && strings.HasSuffix(path, ".log") {
			failing = false
			return errors.New("EIO (injected)")
		}
		return nil
	}
	fi, _ := d.store.journal.f.Stat()
	_, err := d.CreateVolume(context.Background(), createReq("failed", 0))
	testkit.WantCode(t, err, codes.Internal, "EIO (injected)")
	if _, err := d.store.readVolume(volumeIDFor("failed")); !os.IsNotExist(err) {
		t.Errorf("the failed create is in the index: %v", err)
	}
	if fi2, _ := d.store.journal.f.Stat(); fi2.Size() != fi.Size() {
		t.Errorf("the log grew from %d to %d bytes with a failed create", fi.Size(), fi2.Size())
	}
	mustCreate(t, d, createReq("after", 0))
	d = reopen(t, d)
	for name, want := range map[string]bool{"before": true, "failed": false, "after": true} {
		if _, err := d.store.readVolume(volumeIDFor(name)); (err == nil) != want {
			t.Errorf("after a restart, volume %s: %v, want present=%v", name, err, want)
		}
	}
}
