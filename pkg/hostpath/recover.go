package hostpath

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// recover runs once when a Driver opens BasePath, after the work of dead
// Drivers has been purged. It cleans up what an interrupted create or
// delete can leave (docs/reliability.md §10):
//
//   - a record without its data: only a power loss can leave one (creates
//     rename the data into place before the record, deletes remove the
//     record before the data), so the record is removed;
//   - an empty record: a create interrupted by a power loss before its
//     sync (an acknowledged record was synced), so it is removed;
//   - data without a record: a create killed between its two renames, or a
//     delete killed between its two steps. A retry of the create replaces
//     it, a retry of the delete removes it; when alone says no other live
//     Driver shares BasePath (one could be between the two renames of a
//     create right now), it is removed here;
//   - a record's temporary file (.<id>.json.*.tmp), removed when alone.
//
// Finally, when a Driver died here without closing (dead), it syncs the
// file system once, so that everything that Driver left in the page cache
// (a record renamed into place whose sync it did not live to run)
// is durable before this one answers a retry with it.
func (s *store) recover(alone, dead bool) {
	kinds := []struct {
		kind  string
		valid func(string) bool
		data  func(string) string
		dir   string
	}{
		{"volumes", validVolumeID, s.volumePath, s.volumesDir()},
		{"snapshots", validSnapshotID, s.snapshotPath, s.snapshotsDir()},
	}
	for _, k := range kinds {
		entries, err := os.ReadDir(s.metaDir(k.kind))
		if err != nil {
			s.log.Warn("recovery: cannot list records", "kind", k.kind, "error", err)
			continue
		}
		records := map[string]bool{}
		for _, e := range entries {
			name := e.Name()
			path := filepath.Join(s.metaDir(k.kind), name)
			if strings.HasPrefix(name, ".") && strings.HasSuffix(name, ".tmp") {
				if alone {
					s.log.Info("recovery: removing a record being written when its Driver stopped", "path", path)
					os.Remove(path)
				}
				continue
			}
			id, ok := strings.CutSuffix(name, ".json")
			if !ok || !k.valid(id) || !e.Type().IsRegular() {
				continue
			}
			fi, err := e.Info()
			if err == nil && fi.Size() == 0 {
				s.log.Warn("recovery: removing an empty record (a create interrupted before it returned)", "kind", k.kind, "id", id)
				os.Remove(path)
				continue
			}
			if _, err := os.Lstat(k.data(id)); errors.Is(err, fs.ErrNotExist) {
				s.log.Warn("recovery: removing a record without data (a create or delete interrupted by a power loss)", "kind", k.kind, "id", id)
				os.Remove(path)
				continue
			}
			records[id] = true
		}
		if !alone {
			continue
		}
		data, err := os.ReadDir(k.dir)
		if err != nil {
			s.log.Warn("recovery: cannot list data", "kind", k.kind, "error", err)
			continue
		}
		for _, e := range data {
			id := e.Name()
			if !k.valid(id) || records[id] {
				continue
			}
			s.log.Info("recovery: removing data without a record (a create or delete that never returned)", "kind", k.kind, "id", id)
			if err := s.trash(k.data(id), "recover-"+id); err != nil {
				s.log.Warn("recovery: cannot remove data without a record", "kind", k.kind, "id", id, "error", err)
			}
		}
	}
	if dead {
		if err := s.sync.syncFS(s.base); err != nil {
			s.log.Warn("recovery: syncfs failed", "error", err)
		}
	}
}
