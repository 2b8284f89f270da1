package hostpath

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// dirPerm is used for every directory the driver owns (not for volume data):
// records and snapshots are nobody else's business on the host.
const dirPerm = 0o750

// volumeRecord is meta/volumes/<id>.json.
type volumeRecord struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// CapacityBytes is what CreateVolume / ControllerExpandVolume granted.
	// It is recorded and reported, not enforced: a directory has no size,
	// and project quotas would tie the driver to xfs/ext4 with prjquota.
	CapacityBytes    int64     `json:"capacityBytes"`
	SourceSnapshotID string    `json:"sourceSnapshotId,omitempty"`
	SourceVolumeID   string    `json:"sourceVolumeId,omitempty"`
	CreatedAt        time.Time `json:"createdAt"`
}

// snapshotRecord is meta/snapshots/<id>.json.
type snapshotRecord struct {
	ID             string    `json:"id"`
	Name           string    `json:"name"`
	SourceVolumeID string    `json:"sourceVolumeId"`
	SizeBytes      int64     `json:"sizeBytes"`
	CreatedAt      time.Time `json:"createdAt"`
}

// attachmentsRecord is meta/attachments/<volume id>.json: the nodes a volume
// is ControllerPublished to.
type attachmentsRecord struct {
	VolumeID string       `json:"volumeId"`
	Nodes    []attachment `json:"nodes"`
}

func (r *attachmentsRecord) nodeIDs() []string {
	ids := make([]string, len(r.Nodes))
	for i, n := range r.Nodes {
		ids[i] = n.NodeID
	}
	return ids
}

type attachment struct {
	NodeID     string `json:"nodeId"`
	Readonly   bool   `json:"readonly"`
	AccessMode string `json:"accessMode"`
}

// store owns the layout under BasePath. Methods that take an ID expect it to
// have been validated (validVolumeID / validSnapshotID) by the caller.
type store struct {
	base string
	log  *slog.Logger

	// work is this Driver's own directory under tmp; lock holds the flock
	// that tells other Drivers sharing BasePath (a node process next to a
	// controller process) that work is still in use.
	work     string
	lock     *os.File
	lockPath string
}

func openStore(base string, log *slog.Logger) (*store, error) {
	s := &store{base: base, log: log}
	for _, dir := range []string{
		base,
		s.volumesDir(), s.snapshotsDir(),
		s.metaDir("volumes"), s.metaDir("snapshots"), s.metaDir("attachments"),
		s.tmpDir(),
	} {
		if err := ensureDir(dir, dirPerm); err != nil {
			return nil, err
		}
	}
	s.purgeStaleWork()
	if err := s.claimWork(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *store) volumesDir() string          { return filepath.Join(s.base, "volumes") }
func (s *store) snapshotsDir() string        { return filepath.Join(s.base, "snapshots") }
func (s *store) metaDir(kind string) string  { return filepath.Join(s.base, "meta", kind) }
func (s *store) tmpDir() string              { return filepath.Join(s.base, "tmp") }
func (s *store) volumePath(id string) string { return filepath.Join(s.volumesDir(), id) }
func (s *store) snapshotPath(id string) string {
	return filepath.Join(s.snapshotsDir(), id)
}

// claimWork creates tmp/<random>/ and holds an exclusive flock on
// tmp/<random>.lock for the life of the process. The lock is taken on a
// hidden file that is then renamed into place, so purgeStaleWork in another
// process never finds an unlocked lock file or a work directory without one.
func (s *store) claimWork() error {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	name := hex.EncodeToString(b[:])
	f, err := os.CreateTemp(s.tmpDir(), ".claim-*")
	if err != nil {
		return err
	}
	fail := func(err error) error {
		os.Remove(f.Name())
		f.Close()
		return err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fail(fmt.Errorf("lock %s: %w", f.Name(), err))
	}
	lockPath := filepath.Join(s.tmpDir(), name+".lock")
	if err := os.Rename(f.Name(), lockPath); err != nil {
		return fail(err)
	}
	work := filepath.Join(s.tmpDir(), name)
	if err := os.Mkdir(work, dirPerm); err != nil {
		os.Remove(lockPath)
		f.Close()
		return err
	}
	s.work, s.lock, s.lockPath = work, f, lockPath
	return nil
}

// purgeStaleWork removes the work directories of Drivers that are gone: their
// lock file can be locked (the kernel released it when they exited) or has
// been removed already.
func (s *store) purgeStaleWork() {
	entries, err := os.ReadDir(s.tmpDir())
	if err != nil {
		s.log.Warn("cannot list tmp for cleanup", "error", err)
		return
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue // a claim in progress
		}
		if strings.HasSuffix(name, ".lock") {
			if _, err := os.Lstat(filepath.Join(s.tmpDir(), strings.TrimSuffix(name, ".lock"))); errors.Is(err, fs.ErrNotExist) {
				s.removeIfUnlocked(filepath.Join(s.tmpDir(), name), "")
			}
			continue
		}
		s.removeIfUnlocked(filepath.Join(s.tmpDir(), name+".lock"), filepath.Join(s.tmpDir(), name))
	}
}

func (s *store) removeIfUnlocked(lockPath, work string) {
	f, err := os.OpenFile(lockPath, os.O_RDWR, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// A work directory whose lock is gone was being removed when its
		// Driver died.
	case err != nil:
		s.log.Warn("cannot open tmp lock", "path", lockPath, "error", err)
		return
	default:
		defer f.Close()
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			return // still in use by a live Driver
		}
	}
	if work != "" {
		if err := removeTree(work); err != nil {
			s.log.Warn("cannot remove stale work directory", "path", work, "error", err)
			return
		}
		s.log.Info("removed work left by a previous run", "path", work)
	}
	os.Remove(lockPath)
}

func (s *store) close() error {
	if s.lock == nil {
		return nil
	}
	err := removeTree(s.work)
	os.Remove(s.lockPath)
	s.lock.Close()
	s.lock = nil
	return err
}

// newWorkDir returns a fresh directory inside this Driver's work area, on the
// same file system as volumes/ and snapshots/ so that finished work is
// published with a single rename.
func (s *store) newWorkDir(prefix string) (string, error) {
	return os.MkdirTemp(s.work, prefix+"-*")
}

// --- records ---

func (s *store) recordPath(kind, id string) string {
	return filepath.Join(s.metaDir(kind), id+".json")
}

// readVolume returns fs.ErrNotExist (wrapped) when the volume has no record.
func (s *store) readVolume(id string) (*volumeRecord, error) {
	var r volumeRecord
	if err := readJSON(s.recordPath("volumes", id), &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (s *store) writeVolume(r *volumeRecord) error {
	return writeJSON(s.recordPath("volumes", r.ID), r)
}

func (s *store) removeVolumeRecord(id string) error {
	return removeFile(s.recordPath("volumes", id))
}

func (s *store) readSnapshot(id string) (*snapshotRecord, error) {
	var r snapshotRecord
	if err := readJSON(s.recordPath("snapshots", id), &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (s *store) writeSnapshot(r *snapshotRecord) error {
	return writeJSON(s.recordPath("snapshots", r.ID), r)
}

func (s *store) removeSnapshotRecord(id string) error {
	return removeFile(s.recordPath("snapshots", id))
}

// readAttachments returns an empty record when the volume has none.
func (s *store) readAttachments(volumeID string) (*attachmentsRecord, error) {
	r := attachmentsRecord{VolumeID: volumeID}
	err := readJSON(s.recordPath("attachments", volumeID), &r)
	if errors.Is(err, fs.ErrNotExist) {
		return &r, nil
	}
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// writeAttachments stores r, or removes the file when r has no nodes left.
func (s *store) writeAttachments(r *attachmentsRecord) error {
	if len(r.Nodes) == 0 {
		return removeFile(s.recordPath("attachments", r.VolumeID))
	}
	return writeJSON(s.recordPath("attachments", r.VolumeID), r)
}

// listVolumes returns every volume record sorted by ID.
func (s *store) listVolumes() ([]*volumeRecord, error) {
	ids, err := s.listIDs("volumes", validVolumeID)
	if err != nil {
		return nil, err
	}
	out := make([]*volumeRecord, 0, len(ids))
	for _, id := range ids {
		r, err := s.readVolume(id)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted while listing
		}
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// listSnapshots returns every snapshot record sorted by ID.
func (s *store) listSnapshots() ([]*snapshotRecord, error) {
	ids, err := s.listIDs("snapshots", validSnapshotID)
	if err != nil {
		return nil, err
	}
	out := make([]*snapshotRecord, 0, len(ids))
	for _, id := range ids {
		r, err := s.readSnapshot(id)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// listAttachments returns the attachment records of all volumes.
func (s *store) listAttachments() ([]*attachmentsRecord, error) {
	ids, err := s.listIDs("attachments", validVolumeID)
	if err != nil {
		return nil, err
	}
	out := make([]*attachmentsRecord, 0, len(ids))
	for _, id := range ids {
		r, err := s.readAttachments(id)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// listIDs lists the record files of kind, ignoring anything that is not
// "<valid id>.json" (in particular the dot-files writeJSON works in).
func (s *store) listIDs(kind string, valid func(string) bool) ([]string, error) {
	entries, err := os.ReadDir(s.metaDir(kind))
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if ok && valid(id) && e.Type().IsRegular() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// --- file helpers ---

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("record %s is corrupt: %w", path, err)
	}
	return nil
}

// writeJSON replaces path atomically: readers (possibly another process on
// the same BasePath) see the old or the new record, never a partial one, and
// the record survives a power loss once writeJSON returns.
func writeJSON(path string, v any) (err error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(b); err != nil {
		return err
	}
	if err = f.Chmod(0o640); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}

// removeFile removes path; a missing file is not an error.
func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// removeTree is os.RemoveAll that also removes what a pod made read-only: a
// directory without write permission cannot have its entries removed, which
// only root gets away with. Symlinks are not followed (WalkDir lstat's).
func removeTree(path string) error {
	if err := os.RemoveAll(path); err == nil {
		return nil
	}
	filepath.WalkDir(path, func(p string, de fs.DirEntry, err error) error {
		if de != nil && de.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(path)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
