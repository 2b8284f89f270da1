package hostpath

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// recover runs once when a Driver opens BasePath, after the work of dead
// Drivers has been purged and the volumes have been read (st: the records
// folder with the journal replayed over it). It cleans up what an
// interrupted call can leave (docs/reliability.md §10):
//
//   - the journal, when alone (no other live Driver shares BasePath): its
//     logs are folded into the records folder (replayAtStart);
//   - a volume directory without a record: a delete whose entry was
//     durable but whose directory was not removed yet, or a copy placed
//     by a create that never appended its entry; removed when alone (one
//     could be between those steps right now otherwise). An empty volume
//     without its directory is not a leftover: the directory is made at
//     first use;
//   - for snapshots, which keep a record file each: a record without its
//     data (only a power loss can leave one: creates rename the data into
//     place before the record, deletes remove the record before the
//     data) or an empty one (a create cut before its sync) is removed;
//     data without a record is removed when alone;
//   - a record's temporary file (.<id>.json.*.tmp), removed when alone.
//
// Finally, when a Driver died here without closing (dead), it syncs the
// file system once, so that everything that Driver left in the page cache
// (a snapshot record renamed into place whose sync it did not live to
// run) is durable before this one answers a retry with it.
func (s *store) recover(st *volumeState, alone, dead bool) {
	if alone {
		s.replayAtStart(st)
		s.removeTemporaries("volumes")
		s.removeOrphans("volumes", validVolumeID, s.volumesDir(), s.hasVolume)
		s.removeOrphans("made files", validVolumeID, s.metaDir("made"), s.hasVolume)
	}
	records := s.recoverSnapshotRecords(alone)
	if alone {
		s.removeOrphans("snapshots", validSnapshotID, s.snapshotsDir(), func(id string) bool { return records[id] })
	}
	if dead {
		if err := s.sync.syncFS(s.base); err != nil {
			s.log.Warn("recovery: syncfs failed", "error", err)
		}
	}
}

// removeTemporaries removes the temporary record files of kind.
func (s *store) removeTemporaries(kind string) {
	entries, err := os.ReadDir(s.metaDir(kind))
	if err != nil {
		s.log.Warn("recovery: cannot list records", "kind", kind, "error", err)
		return
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") && strings.HasSuffix(name, ".tmp") {
			path := filepath.Join(s.metaDir(kind), name)
			s.log.Info("recovery: removing a record being written when its Driver stopped", "path", path)
			os.Remove(path)
		}
	}
}

// recoverSnapshotRecords checks the snapshot records and returns the IDs
// that have one.
func (s *store) recoverSnapshotRecords(alone bool) map[string]bool {
	records := map[string]bool{}
	if alone {
		s.removeTemporaries("snapshots")
	}
	entries, err := os.ReadDir(s.metaDir("snapshots"))
	if err != nil {
		s.log.Warn("recovery: cannot list records", "kind", "snapshots", "error", err)
		return records
	}
	for _, e := range entries {
		name := e.Name()
		id, ok := strings.CutSuffix(name, ".json")
		if !ok || !validSnapshotID(id) || !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(s.metaDir("snapshots"), name)
		fi, err := e.Info()
		if err == nil && fi.Size() == 0 {
			s.log.Warn("recovery: removing an empty record (a create interrupted before it returned)", "kind", "snapshots", "id", id)
			os.Remove(path)
			continue
		}
		if _, err := os.Lstat(s.snapshotPath(id)); errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("recovery: removing a record without data (a create or delete interrupted by a power loss)", "kind", "snapshots", "id", id)
			os.Remove(path)
			continue
		}
		records[id] = true
	}
	return records
}

// removeOrphans removes the data directories of kind that have no record.
func (s *store) removeOrphans(kind string, valid func(string) bool, dir string, has func(string) bool) {
	data, err := os.ReadDir(dir)
	if err != nil {
		s.log.Warn("recovery: cannot list data", "kind", kind, "error", err)
		return
	}
	for _, e := range data {
		id := e.Name()
		if !valid(id) || has(id) {
			continue
		}
		s.log.Info("recovery: removing data without a record (a create or delete that never returned)", "kind", kind, "id", id)
		path := filepath.Join(dir, id)
		if err := s.trash(path, "recover-"+id); err != nil {
			s.log.Warn("recovery: cannot remove data without a record", "kind", kind, "id", id, "error", err)
		}
	}
}
