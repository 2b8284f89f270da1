package hostpath

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// volumeIndex holds a base path's volumes in memory: the records folder
// (meta/volumes/<id>.json) with the journal's logs replayed over it, in
// generation order. The Driver that holds the journal's lease changes it
// after each durable append and never reads the disk again; any other
// Driver (a reader) reads what was appended since its last look before
// each lookup (refresh).
type volumeIndex struct {
	mu   sync.RWMutex
	vols map[string]*volumeRecord
	// corrupt are records in the folder that could not be decoded and that
	// no log entry replaced: a lookup of one fails INTERNAL, naming it.
	corrupt map[string]error
	// gen and off say how far the journal has been read: generation gen
	// up to byte off (gen 0: none).
	gen uint64
	off int64
	// writer: this Driver holds the lease; the index is the truth.
	writer bool
}

// listLogs returns the generations in dir, ascending.
func listLogs(dir string) ([]uint64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var gens []uint64
	for _, e := range entries {
		if g, ok := parseLogName(e.Name()); ok && e.Type().IsRegular() {
			gens = append(gens, g)
		}
	}
	slices.Sort(gens)
	return gens, nil
}

// volumeState is one full read of a base path's volumes.
type volumeState struct {
	vols    map[string]*volumeRecord
	corrupt map[string]error
	// empty are empty record files no log entry replaced: what a create of
	// the layout before the journal left when a power loss cut it before
	// its sync; recovery removes them.
	empty []string
	gen   uint64
	off   int64
	// damaged names the logs whose reading stopped at a damaged entry.
	damaged []string
}

func (st *volumeState) apply(e *journalEntry) { applyEntry(st.vols, st.corrupt, e) }

// applyEntry is e's effect on a set of volumes: the one place an entry is
// interpreted.
func applyEntry(vols map[string]*volumeRecord, corrupt map[string]error, e *journalEntry) {
	delete(corrupt, e.ID)
	switch e.Op {
	case opPut:
		vols[e.ID] = e.Volume
	case opDelete:
		delete(vols, e.ID)
	}
}

// readVolumeState reads the folder and then every log. Compaction by the
// writer may remove a log between the listing and its reading; what it
// held is in the folder by then, so the whole read starts again.
func readVolumeState(metaVolumes, journal string) (*volumeState, error) {
	for attempt := 0; ; attempt++ {
		st, err := readVolumeStateOnce(metaVolumes, journal)
		if !errors.Is(err, fs.ErrNotExist) || attempt == 10 {
			return st, err
		}
	}
}

func readVolumeStateOnce(metaVolumes, journal string) (*volumeState, error) {
	gens, err := listLogs(journal)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	st := &volumeState{vols: map[string]*volumeRecord{}, corrupt: map[string]error{}}
	entries, err := os.ReadDir(metaVolumes)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	empty := map[string]bool{}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !validVolumeID(id) || !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(metaVolumes, e.Name())
		b, err := os.ReadFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // removed by a compaction meanwhile: its log said so
		case err != nil:
			st.corrupt[id] = err
		case len(b) == 0:
			empty[id] = true
		default:
			var r volumeRecord
			if err := json.Unmarshal(b, &r); err != nil {
				st.corrupt[id] = fmt.Errorf("record %s is corrupt: %w", path, err)
			} else {
				st.vols[id] = &r
			}
		}
	}
	for _, g := range gens {
		b, err := os.ReadFile(filepath.Join(journal, logName(g)))
		if err != nil {
			return nil, err // fs.ErrNotExist: compacted meanwhile, read again
		}
		n, bad := decodeEntries(b, func(e *journalEntry) { delete(empty, e.ID); st.apply(e) })
		if bad {
			st.damaged = append(st.damaged, fmt.Sprintf("%s at byte %d of %d", logName(g), n, len(b)))
		}
		st.gen, st.off = g, int64(n)
	}
	for id := range empty {
		st.empty = append(st.empty, id)
	}
	slices.Sort(st.empty)
	return st, nil
}

// load replaces the index with a full read.
func (s *store) loadVolumes() (*volumeState, error) {
	st, err := readVolumeState(s.metaDir("volumes"), s.journalDir())
	if err != nil {
		return nil, err
	}
	ix := &s.index
	ix.mu.Lock()
	ix.vols, ix.corrupt, ix.gen, ix.off = st.vols, st.corrupt, st.gen, st.off
	ix.mu.Unlock()
	return st, nil
}

// refresh brings a reader's index up to date: the rest of the log it read
// last and every newer generation. When that log is gone or a generation
// is missing, compaction has folded logs into the folder since, and the
// index is read again in full.
func (s *store) refresh() error {
	ix := &s.index
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.writer {
		return nil
	}
	gens, err := listLogs(s.journalDir())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	start := 0
	if ix.gen != 0 {
		i, found := slices.BinarySearch(gens, ix.gen)
		if !found {
			return s.reloadLocked()
		}
		start = i
	} else if len(gens) > 0 && gens[0] != 1 {
		return s.reloadLocked()
	}
	for _, g := range gens[start:] {
		if g != ix.gen && g != ix.gen+1 {
			return s.reloadLocked() // a generation was compacted before it was read
		}
		from := int64(0)
		if g == ix.gen {
			from = ix.off
		}
		n, err := s.readLogFrom(g, from, func(e *journalEntry) { applyEntry(ix.vols, ix.corrupt, e) })
		if errors.Is(err, fs.ErrNotExist) {
			return s.reloadLocked()
		}
		if err != nil {
			return err
		}
		ix.gen, ix.off = g, from+n
	}
	return nil
}

func (s *store) reloadLocked() error {
	st, err := readVolumeState(s.metaDir("volumes"), s.journalDir())
	if err != nil {
		return err
	}
	ix := &s.index
	ix.vols, ix.corrupt, ix.gen, ix.off = st.vols, st.corrupt, st.gen, st.off
	return nil
}

// readLogFrom decodes generation g from byte off on and returns how many
// bytes the intact entries took.
func (s *store) readLogFrom(g uint64, off int64, fn func(*journalEntry)) (int64, error) {
	f, err := os.Open(filepath.Join(s.journalDir(), logName(g)))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return 0, err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return 0, err
	}
	n, _ := decodeEntries(b, fn)
	return int64(n), nil
}

// readVolume returns a copy of the volume's record, fs.ErrNotExist
// (wrapped) when there is none.
func (s *store) readVolume(id string) (*volumeRecord, error) {
	if err := s.refresh(); err != nil {
		return nil, err
	}
	ix := &s.index
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if err, ok := ix.corrupt[id]; ok {
		return nil, err
	}
	r, ok := ix.vols[id]
	if !ok {
		return nil, &fs.PathError{Op: "read", Path: s.recordPath("volumes", id), Err: fs.ErrNotExist}
	}
	c := *r
	return &c, nil
}

// listVolumes returns every volume record sorted by ID.
func (s *store) listVolumes() ([]*volumeRecord, error) {
	if err := s.refresh(); err != nil {
		return nil, err
	}
	ix := &s.index
	ix.mu.RLock()
	for _, id := range slices.Sorted(maps.Keys(ix.corrupt)) {
		err := ix.corrupt[id]
		ix.mu.RUnlock()
		return nil, err
	}
	out := make([]*volumeRecord, 0, len(ix.vols))
	for _, r := range ix.vols {
		c := *r
		out = append(out, &c)
	}
	ix.mu.RUnlock()
	slices.SortFunc(out, func(a, b *volumeRecord) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// hasVolume reports whether id has a record (recovery).
func (s *store) hasVolume(id string) bool {
	ix := &s.index
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	_, ok := ix.vols[id]
	_, bad := ix.corrupt[id]
	return ok || bad
}

// VolumeInfo is what a base path records of a volume, for tools that
// look at a base path without opening a driver on it.
type VolumeInfo struct {
	Name          string
	CapacityBytes int64
	Parameters    map[string]string
}

// VolumesAt reads the volumes recorded under a base path (the records
// folder and the journal), by volume ID.
func VolumesAt(base string) (map[string]VolumeInfo, error) {
	st, err := readVolumeState(filepath.Join(base, "meta", "volumes"), filepath.Join(base, "meta", journalDir))
	if err != nil {
		return nil, err
	}
	out := make(map[string]VolumeInfo, len(st.vols))
	for id, r := range st.vols {
		out[id] = VolumeInfo{Name: r.Name, CapacityBytes: r.CapacityBytes, Parameters: r.Parameters}
	}
	return out, nil
}
