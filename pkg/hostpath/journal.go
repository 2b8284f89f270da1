package hostpath

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The volume journal (docs/reliability.md §10). A create, an expansion or
// a delete of a volume appends one entry to the current log file,
// meta/journal/<generation>.log, and returns once an fdatasync(2) of the
// log has finished after the append: group commit. The first caller that
// waits syncs; callers that append while that sync runs wait for it to end
// and then share the next sync, whose first waiter runs it; no caller
// waits behind more than one sync it is not part of, and one sync makes
// every entry appended before it durable. A log that passes compactAt
// bytes is retired: later entries go to a new generation, and compaction
// (compact.go) folds the retired logs into meta/volumes/<id>.json off the
// request path.
//
// One Driver at a time appends to a base path's journal: the writer holds
// an exclusive flock(2) on meta/journal.lock (the lease), taken at its
// first change and kept until Close. Other Drivers on the base path (a
// node plugin next to the controller) only read the journal.

const (
	journalDir  = "journal"
	journalLock = "journal.lock"
	// frameHeader is an entry's length and its CRC-32C, 4 bytes each.
	frameHeader = 8
	// maxEntry bounds one entry's JSON: a volume record with its
	// parameters (each at most 128 KiB in total, CSI) is far below.
	maxEntry = 4 << 20
)

// compactAt is the size at which a log is retired and compacted (4 MiB;
// the crash test sets a smaller one, testwindow.go).
var compactAt = testCompactAt(4 << 20)

// Journal operations.
const (
	opPut    = "put"    // the volume's record is Volume (a create, an expansion)
	opDelete = "delete" // the volume ID is gone
)

// journalEntry is one change of one volume.
type journalEntry struct {
	Op     string        `json:"op"`
	ID     string        `json:"id"`
	Volume *volumeRecord `json:"volume,omitempty"`
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodeEntry frames e: little-endian length and CRC-32C of the JSON,
// then the JSON.
func encodeEntry(e *journalEntry) ([]byte, error) {
	payload, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	if len(payload) > maxEntry {
		return nil, fmt.Errorf("journal entry of volume %s is %d bytes, more than %d", e.ID, len(payload), maxEntry)
	}
	b := make([]byte, frameHeader, frameHeader+len(payload))
	binary.LittleEndian.PutUint32(b[0:4], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[4:8], crc32.Checksum(payload, castagnoli))
	return append(b, payload...), nil
}

// decodeEntries calls fn for each intact entry at the start of b, in order,
// and returns how many bytes they take. It stops at the first entry that is
// incomplete (an append being written, or torn by a power loss) or damaged
// (its checksum, length or content is wrong); bad is true for a damaged
// one, which nothing can follow.
func decodeEntries(b []byte, fn func(*journalEntry)) (n int, bad bool) {
	for {
		rest := b[n:]
		if len(rest) < frameHeader {
			return n, false
		}
		size := binary.LittleEndian.Uint32(rest[0:4])
		if size == 0 || size > maxEntry {
			return n, true
		}
		if uint64(len(rest)) < frameHeader+uint64(size) {
			return n, false
		}
		payload := rest[frameHeader : frameHeader+size]
		if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(rest[4:8]) {
			return n, true
		}
		var e journalEntry
		if err := json.Unmarshal(payload, &e); err != nil || !validEntry(&e) {
			return n, true
		}
		fn(&e)
		n += frameHeader + int(size)
	}
}

func validEntry(e *journalEntry) bool {
	if !validVolumeID(e.ID) {
		return false
	}
	switch e.Op {
	case opPut:
		return e.Volume != nil && e.Volume.ID == e.ID
	case opDelete:
		return e.Volume == nil
	}
	return false
}

// logName is the file of generation gen; generations sort as names.
func logName(gen uint64) string { return fmt.Sprintf("%016x.log", gen) }

// parseLogName is logName's inverse.
func parseLogName(name string) (uint64, bool) {
	var gen uint64
	if len(name) != 20 || filepath.Ext(name) != ".log" {
		return 0, false
	}
	if _, err := fmt.Sscanf(name, "%016x.log", &gen); err != nil {
		return 0, false
	}
	return gen, true
}

// syncRound is one fdatasync shared by the entries appended before it.
type syncRound struct {
	done chan struct{}
	err  error
	// led: a caller has taken the round and runs its sync once the sync
	// in progress has finished.
	led bool
}

// journal is the write side: the lease, the current log and the group
// commit.
type journal struct {
	dir       string // meta/journal
	lockPath  string // meta/journal.lock
	base      string // for messages
	sync      *syncer
	compactor func(below uint64) // runs compaction of the logs below a generation

	mu    sync.Mutex
	idle  sync.Cond // signalled when a sync ends
	lease *os.File
	f     *os.File // the current log, O_APPEND
	gen   uint64
	// size is what has been written to f, synced what a sync has made
	// durable.
	size, synced int64
	// retired are logs replaced by f whose last entries still await a
	// sync.
	retired []*os.File
	open    *syncRound // the round the next append joins
	syncing bool
	// broken is set when a failed sync could not be undone: nothing is
	// appended any more (a restart replays what is on disk).
	broken error
}

// acquire takes the lease, waiting while another Driver holds it, until
// ctx ends.
func (j *journal) acquire(ctx context.Context) (*os.File, error) {
	f, err := os.OpenFile(j.lockPath, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, err
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", j.lockPath, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, unavailable("local-hostpath base path %s: another driver process holds its volume journal (%s); one controller per base path, retry once it has stopped", j.base, j.lockPath)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// startLog opens a new generation after every existing one and makes its
// directory entry durable. Called with mu held (or before the journal is
// shared).
func (j *journal) startLog(after uint64) error {
	gen := after + 1
	f, err := os.OpenFile(filepath.Join(j.dir, logName(gen)), os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	j.sync.note("create", f.Name())
	if err := j.sync.fsyncDir(j.dir); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if j.f != nil {
		j.retired = append(j.retired, j.f)
	}
	j.f, j.gen, j.size, j.synced = f, gen, 0, 0
	return nil
}

// append writes e to the log and returns once it is durable; mu must not
// be held. The caller holds the lease (store.change).
func (j *journal) append(e *journalEntry) error {
	b, err := encodeEntry(e)
	if err != nil {
		return err
	}
	j.mu.Lock()
	if j.broken != nil {
		j.mu.Unlock()
		return j.broken
	}
	if j.size >= compactAt && !j.syncing {
		// Retire the log: the next sync covers its last entries, and
		// compaction starts once it has.
		if err := j.startLog(j.gen); err != nil {
			j.mu.Unlock()
			return fmt.Errorf("start a new journal log in %s: %w", j.dir, err)
		}
	}
	if _, err := j.f.Write(b); err != nil {
		// A short write leaves part of an entry, after which nothing
		// could be read back: cut it off.
		if terr := j.f.Truncate(j.size); terr != nil {
			j.broken = fmt.Errorf("journal %s: a failed append (%v) could not be cut off (%v); restart the driver", j.f.Name(), err, terr)
		}
		j.mu.Unlock()
		return fmt.Errorf("append to %s: %w", j.f.Name(), err)
	}
	j.size += int64(len(b))
	testPoint("journal-appended")
	if j.open == nil {
		j.open = &syncRound{done: make(chan struct{})}
	}
	return j.commit(j.open)
}

// commit waits until round r, which holds the caller's entry, is synced:
// it leads r when no sync runs or, as r's first waiter, once the running
// one ends; every other waiter waits for r's leader. Called with mu held;
// returns with it released.
func (j *journal) commit(r *syncRound) error {
	if r.led {
		j.mu.Unlock()
		<-r.done
		return r.err
	}
	r.led = true
	for j.syncing {
		j.idle.Wait()
	}
	select {
	case <-r.done: // failed with the sync before it (undo)
		j.mu.Unlock()
		return r.err
	default:
	}
	j.syncing = true
	j.open = nil // later appends join a new round
	files := append(j.retired, j.f)
	retired := len(j.retired)
	j.retired = nil
	size := j.size
	j.mu.Unlock()

	var errs []error
	for _, f := range files {
		if err := j.sync.fdatasync(f); err != nil {
			errs = append(errs, fmt.Errorf("fdatasync %s: %w", f.Name(), err))
		}
	}
	err := errors.Join(errs...)

	j.mu.Lock()
	if err == nil {
		j.synced = size
		for _, f := range files[:retired] {
			f.Close()
		}
	} else {
		err = j.undo(err, files[:retired])
	}
	j.syncing = false
	compact := err == nil && retired > 0 && j.compactor != nil
	below := j.gen
	r.err = err
	close(r.done)
	j.idle.Broadcast()
	j.mu.Unlock()
	if compact {
		j.compactor(below)
	}
	return err
}

// undo handles a failed sync (mu held): the entries it covered may or may
// not be on disk, so they are cut off the log and that cut made durable;
// callers get err. The round appended meanwhile fails too (its entries
// were cut with them). When the cut fails, or a retired log was part of
// the sync, the journal is broken.
func (j *journal) undo(err error, retired []*os.File) error {
	if len(retired) > 0 {
		j.broken = fmt.Errorf("local-hostpath base path %s: %w; restart the driver", j.base, err)
		return j.broken
	}
	if terr := j.f.Truncate(j.synced); terr != nil {
		j.broken = fmt.Errorf("local-hostpath base path %s: %w, and the entries could not be cut off the log: %v; restart the driver", j.base, err, terr)
		return j.broken
	}
	if serr := j.sync.fdatasync(j.f); serr != nil {
		j.broken = fmt.Errorf("local-hostpath base path %s: %w, and cutting the entries off the log could not be synced: %v; restart the driver", j.base, err, serr)
		return j.broken
	}
	j.size = j.synced
	if o := j.open; o != nil {
		o.err = err
		close(o.done)
		j.open = nil
	}
	return err
}

// close releases the current log and the lease.
func (j *journal) close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	for j.syncing {
		j.idle.Wait()
	}
	for _, f := range j.retired {
		f.Close()
	}
	if j.f != nil {
		j.f.Close()
	}
	if j.lease != nil {
		j.lease.Close()
	}
	j.retired, j.f, j.lease = nil, nil, nil
	if j.broken == nil {
		j.broken = fmt.Errorf("local-hostpath base path %s: the driver is closed", j.base)
	}
}
