package hostpath

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// compact folds the journal's logs of generations below `below` into the
// records folder and removes them (docs/reliability.md §10); with
// keepNewest, the newest of them stays (start-up recovery: a base path
// always keeps its highest generation, so readers can tell a compacted
// generation from one never made). Every step is safe to interrupt,
// because the logs go last, after what they said is durable in the
// folder, and replaying a log over a folder that already holds it changes
// nothing:
//
//  1. each volume the logs mention gets its last state written: a record
//     file renamed into place (put) or removed (delete), unsynced;
//  2. the record files and meta/volumes are synced;
//  3. the logs are removed, oldest first, and meta/journal synced.
//
// Only the lease holder compacts.
func (s *store) compact(below uint64, keepNewest bool) error {
	gens, err := listLogs(s.journalDir())
	if err != nil {
		return err
	}
	var logs []uint64
	for _, g := range gens {
		if g < below {
			logs = append(logs, g)
		}
	}
	if len(logs) == 0 {
		return nil
	}
	testPoint("compaction-start")
	last := map[string]*journalEntry{}
	for _, g := range logs {
		b, err := os.ReadFile(filepath.Join(s.journalDir(), logName(g)))
		if err != nil {
			return err
		}
		if n, bad := decodeEntries(b, func(e *journalEntry) { last[e.ID] = e }); bad {
			s.log.Warn("journal: a log ends in a damaged entry (a power loss tore an append that was never acknowledged); what follows it is ignored",
				"log", logName(g), "offset", n, "size", len(b))
		}
	}
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for id, e := range last {
		switch e.Op {
		case opPut:
			f, err := s.createRecord("volumes", id, e.Volume)
			if err != nil {
				return err
			}
			files = append(files, f)
		case opDelete:
			path := s.recordPath("volumes", id)
			if err := os.Remove(path); err == nil {
				s.sync.note("remove", path)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	testPoint("compaction-written")
	if err := s.syncAll(files, s.metaDir("volumes")); err != nil {
		return err
	}
	files = nil // closed by syncAll
	testPoint("compaction-synced")
	removed := 0
	for i, g := range logs {
		if keepNewest && i == len(logs)-1 {
			break
		}
		path := filepath.Join(s.journalDir(), logName(g))
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		s.sync.note("remove", path)
		removed++
	}
	if removed > 0 {
		if err := s.sync.fsyncDir(s.journalDir()); err != nil {
			return err
		}
	}
	testPoint("compaction-removed")
	s.log.Debug("journal compacted", "logs", removed, "volumes", len(last))
	return nil
}

// syncAll fsyncs files (and closes them) and then the directory dir, at
// most eight at a time.
func (s *store) syncAll(files []*os.File, dir string) error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, 8)
	)
	for _, f := range files {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := s.sync.fsyncFile(f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return s.sync.fsyncDir(dir)
}

// compactor runs the writer's compactions, one at a time, off the request
// path.
type compactor struct {
	mu      sync.Mutex
	running bool
	next    uint64 // a compaction asked for while one ran
	wg      sync.WaitGroup
}

// start compacts the logs below `below` on a goroutine of its own, or
// after the compaction that is running.
func (c *compactor) start(s *store, below uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running {
		c.next = max(c.next, below)
		return
	}
	c.running = true
	c.wg.Go(func() {
		for {
			if err := s.compact(below, false); err != nil {
				s.log.Warn("journal compaction failed; the logs stay and are compacted later", "error", err)
			}
			c.mu.Lock()
			if c.next == 0 {
				c.running = false
				c.mu.Unlock()
				return
			}
			below, c.next = c.next, 0
			c.mu.Unlock()
		}
	})
}

func (c *compactor) wait() { c.wg.Wait() }
