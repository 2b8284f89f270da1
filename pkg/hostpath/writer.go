package hostpath

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// change appends e to the journal and, once it is durable, applies it to
// the index. A Driver's first change takes the journal's lease.
func (s *store) change(ctx context.Context, e *journalEntry) error {
	if err := s.becomeWriter(ctx); err != nil {
		return err
	}
	if err := s.journal.append(e); err != nil {
		return err
	}
	ix := &s.index
	ix.mu.Lock()
	applyEntry(ix.vols, ix.corrupt, e)
	ix.mu.Unlock()
	return nil
}

// becomeWriter takes the lease, reads the index again as the last writer
// left it (from now on it is the truth), opens a new log generation and
// starts compacting the logs before it.
func (s *store) becomeWriter(ctx context.Context) error {
	if s.writer.Load() {
		return nil
	}
	s.writerMu.Lock()
	defer s.writerMu.Unlock()
	if s.writer.Load() {
		return nil
	}
	lease, err := s.journal.acquire(ctx)
	if err != nil {
		return err
	}
	ix := &s.index
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err := s.reloadLocked(); err != nil {
		lease.Close()
		return fmt.Errorf("read the volume journal %s: %w", s.journalDir(), err)
	}
	gens, err := listLogs(s.journalDir())
	if err != nil {
		lease.Close()
		return err
	}
	var newest uint64
	if len(gens) > 0 {
		newest = gens[len(gens)-1]
	}
	j := &s.journal
	j.mu.Lock()
	j.lease = lease
	err = j.startLog(newest)
	gen := j.gen
	j.mu.Unlock()
	if err != nil {
		lease.Close()
		j.lease = nil
		return fmt.Errorf("start a journal log in %s: %w", s.journalDir(), err)
	}
	ix.writer = true
	s.writer.Store(true)
	if len(gens) > 0 {
		s.compactions.start(s, gen)
	}
	return nil
}

// replayAtStart is the start-up recovery of the journal, run when no other
// Driver is alive on the base path: every log is folded into the records
// folder (the newest log stays, already folded), and empty records that
// no log replaced are removed.
func (s *store) replayAtStart(st *volumeState) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lease, err := s.journal.acquire(ctx)
	if err != nil {
		s.log.Warn("recovery: cannot take the volume journal's lease; the journal is compacted by its writer", "error", err)
		return
	}
	defer lease.Close()
	for _, d := range st.damaged {
		s.log.Warn("recovery: a journal log ends in a damaged entry (an append a power loss tore, never acknowledged); what follows it is ignored", "log", d)
	}
	testPoint("replay-start")
	if gens, _ := listLogs(s.journalDir()); len(gens) > 1 {
		s.log.Info("recovery: finishing a compaction its writer did not finish", "logs", len(gens))
	}
	if st.gen > 0 {
		if err := s.compact(st.gen+1, true); err != nil {
			s.log.Warn("recovery: cannot fold the volume journal into the records; it is replayed again at the next start", "error", err)
			return
		}
	}
	for _, id := range st.empty {
		s.log.Warn("recovery: removing an empty record (a create interrupted before it returned)", "kind", "volumes", "id", id)
		os.Remove(s.recordPath("volumes", id))
	}
}

func (s *store) journalDir() string { return filepath.Join(s.base, "meta", journalDir) }

// exists reports whether volume id has a record.
func (s *store) exists(id string) (bool, error) {
	if err := s.refresh(); err != nil {
		return false, err
	}
	return s.hasVolume(id), nil
}

// mkdir makes an empty volume or snapshot directory with volumeDataPerm
// (Mkdir's mode goes through the umask, so it is set again).
func (s *store) mkdir(path string) error {
	s.sync.note("mkdir", path)
	if err := os.Mkdir(path, volumeDataPerm); err != nil {
		return err
	}
	if err := os.Chmod(path, volumeDataPerm); err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

// volumeDir returns the directory of a volume, made when it is first
// needed: an empty volume's directory is made, with its entry in volumes/
// synced, before anything can be written into it, and meta/made/<id>
// records that it was (docs/reliability.md §10). A volume whose directory
// is missing after that, or whose data was placed at create, is
// FAILED_PRECONDITION.
func (d *Driver) volumeDir(rec *volumeRecord) (string, error) {
	dir := d.store.volumePath(rec.ID)
	fi, err := os.Stat(dir)
	switch {
	case err == nil && fi.IsDir():
		return dir, nil
	case err != nil && os.IsNotExist(err) && rec.DataOnFirstUse && !d.store.made(rec.ID):
		if err := d.store.makeVolumeDir(rec.ID); err != nil {
			return "", internalError(err, "create the directory of volume %s", rec.ID)
		}
		return dir, nil
	}
	return "", failedPrecondition("volume %s has a record but its data directory %s is missing or unreadable", rec.ID, dir)
}

// madePath is the file that says a volume's directory was made.
func (s *store) madePath(id string) string { return filepath.Join(s.metaDir("made"), id) }

// made reports whether the directory of volume id was made at first use.
func (s *store) made(id string) bool {
	_, err := os.Lstat(s.madePath(id))
	return err == nil
}

// makeVolumeDir makes the directory of an empty volume and its made file,
// and returns once both entries are durable. A concurrent call may have
// made them: the syncs still run, so it returns only once they are
// durable too.
func (s *store) makeVolumeDir(id string) error {
	dir := s.volumePath(id)
	if err := s.mkdir(dir); err != nil && !os.IsExist(err) {
		return err
	}
	f, err := os.OpenFile(s.madePath(id), os.O_WRONLY|os.O_CREATE, 0o640)
	if err != nil {
		return err
	}
	f.Close()
	s.sync.note("create", f.Name())
	return s.sync.commit(nil, dir, filepath.Dir(dir), s.metaDir("made"))
}
