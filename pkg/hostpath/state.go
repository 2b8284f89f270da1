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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	CapacityBytes    int64  `json:"capacityBytes"`
	SourceSnapshotID string `json:"sourceSnapshotId,omitempty"`
	SourceVolumeID   string `json:"sourceVolumeId,omitempty"`
	// Parameters are the CreateVolume parameters, kept for the record
	// (an administrator reading meta/, the crash test): the driver has no
	// parameters of its own and they take no part in idempotency.
	Parameters map[string]string `json:"parameters,omitempty"`
	CreatedAt  time.Time         `json:"createdAt"`
	// Fingerprint is the base path marker's fingerprint, which the
	// volume's handle carries (marker.go); empty for a volume made before
	// markers existed, whose handle is its bare ID.
	Fingerprint string `json:"fingerprint,omitempty"`
	// DataOnFirstUse: the volume's directory is made where it is first
	// needed (NodeStageVolume, NodePublishVolume), not at create: an empty
	// volume whose directory is missing was never published.
	DataOnFirstUse bool `json:"dataOnFirstUse,omitempty"`
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
	// seq names work items inside work.
	seq atomic.Uint64

	// sync runs the fsyncs (sync.go); its trace, when set, sees every
	// rename, fsync and syncfs (the durability tests).
	sync syncer

	// Volumes: the index in memory, the journal that changes them
	// (journal.go) and its compaction (compact.go). writer is set once
	// this Driver holds the journal's lease.
	index       volumeIndex
	journal     journal
	compactions compactor
	writerMu    sync.Mutex
	writer      atomic.Bool
}

func openStore(base string, log *slog.Logger) (*store, error) {
	s := &store{base: base, log: log}
	s.journal = journal{dir: s.journalDir(), lockPath: filepath.Join(s.base, "meta", journalLock), base: base, sync: &s.sync}
	s.journal.idle.L = &s.journal.mu
	s.journal.compactor = func(below uint64) { s.compactions.start(s, below) }
	for _, dir := range []string{
		base,
		s.volumesDir(), s.snapshotsDir(),
		s.metaDir("volumes"), s.metaDir("snapshots"), s.metaDir("attachments"),
		s.metaDir("made"), s.journalDir(), s.tmpDir(),
	} {
		if err := ensureDir(dir, dirPerm); err != nil {
			return nil, err
		}
	}
	others, dead := s.purgeStaleWork()
	if err := s.claimWork(); err != nil {
		return nil, err
	}
	st, err := s.loadVolumes()
	if err != nil {
		s.close()
		return nil, fmt.Errorf("read the volumes of %s: %w", base, err)
	}
	s.recover(st, others == 0, dead > 0)
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
// been removed already. It returns how many other Drivers are alive on the
// same BasePath (-1 when that cannot be told) and how many dead ones left
// their work behind (they stopped without Close: killed, or a power loss).
func (s *store) purgeStaleWork() (others, dead int) {
	entries, err := os.ReadDir(s.tmpDir())
	if err != nil {
		s.log.Warn("cannot list tmp for cleanup", "error", err)
		return -1, 0
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			// A claim: a Driver starting now (it may not hold its lock
			// yet), or, once old, one that died starting.
			fi, err := e.Info()
			if err != nil || time.Since(fi.ModTime()) < time.Minute || !s.removeIfUnlocked(filepath.Join(s.tmpDir(), name), "") {
				others++
			}
			continue
		}
		if strings.HasSuffix(name, ".lock") {
			if _, err := os.Lstat(filepath.Join(s.tmpDir(), strings.TrimSuffix(name, ".lock"))); errors.Is(err, fs.ErrNotExist) {
				if !s.removeIfUnlocked(filepath.Join(s.tmpDir(), name), "") {
					others++
				}
			}
			continue
		}
		if s.removeIfUnlocked(filepath.Join(s.tmpDir(), name+".lock"), filepath.Join(s.tmpDir(), name)) {
			dead++
		} else {
			others++
		}
	}
	return others, dead
}

// removeIfUnlocked removes work and lockPath unless a live Driver holds the
// lock; it reports false when one does (or the lock cannot be read).
func (s *store) removeIfUnlocked(lockPath, work string) bool {
	f, err := os.OpenFile(lockPath, os.O_RDWR, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// A work directory whose lock is gone was being removed when its
		// Driver died.
	case err != nil:
		s.log.Warn("cannot open tmp lock", "path", lockPath, "error", err)
		return false
	default:
		defer f.Close()
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			return false // still in use by a live Driver
		}
	}
	if work != "" {
		if err := removeTree(work); err != nil {
			s.log.Warn("cannot remove stale work directory", "path", work, "error", err)
			return true
		}
		s.log.Info("removed work left by a previous run", "path", work)
	}
	os.Remove(lockPath)
	return true
}

func (s *store) close() error {
	if s.lock == nil {
		return nil
	}
	s.compactions.wait()
	s.journal.close()
	err := removeTree(s.work)
	os.Remove(s.lockPath)
	s.lock.Close()
	s.lock = nil
	return err
}

// workPath returns a fresh name inside this Driver's work area, on the same
// file system as volumes/ and snapshots/ so that finished work is published
// with a single rename. Nothing is created.
func (s *store) workPath(prefix string) string {
	return filepath.Join(s.work, prefix+"-"+strconv.FormatUint(s.seq.Add(1), 10))
}

// rename is os.Rename, seen by the trace.
func (s *store) rename(from, to string) error {
	s.sync.note("rename", to)
	return os.Rename(from, to)
}

// trash moves path into the work area and removes it there, so that no one
// ever sees it half-removed; a missing path is not an error. What cannot be
// removed now is purged by the next Driver to start.
func (s *store) trash(path, prefix string) error {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	aside := s.workPath(prefix)
	if err := s.rename(path, aside); err != nil {
		return err
	}
	s.sync.note("remove", aside)
	if err := removeTree(aside); err != nil {
		s.log.Warn("cannot remove work directory; the next start will retry", "path", aside, "error", err)
	}
	return nil
}

// --- records ---

func (s *store) recordPath(kind, id string) string {
	return filepath.Join(s.metaDir(kind), id+".json")
}

// createRecord publishes the record of a new volume or snapshot: it writes
// it to a temporary file in kind's record directory and renames it into
// place, without syncing. The file is returned open, for the sync that
// makes it durable (syncer.commit closes it). Until that sync a
// power loss may leave the record empty; recover removes empty records,
// and only a create that has not returned yet can leave one, because an
// acknowledged record has been synced.
func (s *store) createRecord(kind, id string, v any) (f *os.File, err error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	f, err = os.CreateTemp(s.metaDir(kind), "."+id+".json.*.tmp")
	if err != nil {
		return nil, err
	}
	s.sync.note("create", f.Name())
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(b); err != nil {
		return nil, err
	}
	if err = f.Chmod(0o640); err != nil {
		return nil, err
	}
	if err = s.rename(f.Name(), s.recordPath(kind, id)); err != nil {
		return nil, err
	}
	return f, nil
}

func (s *store) readSnapshot(id string) (*snapshotRecord, error) {
	var r snapshotRecord
	if err := readJSON(s.recordPath("snapshots", id), &r); err != nil {
		return nil, err
	}
	return &r, nil
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
		return s.removeFile(s.recordPath("attachments", r.VolumeID))
	}
	return s.writeJSON(s.recordPath("attachments", r.VolumeID), r)
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
// the record survives a power loss once writeJSON returns. Unlike
// createRecord it syncs the file before the rename, because it replaces a
// record that may already have been acknowledged (an expansion, the
// attachments): a power loss must leave the old or the new content, never
// an empty file.
func (s *store) writeJSON(path string, v any) (err error) {
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
	if err = s.sync.fsyncFile(f); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = s.rename(f.Name(), path); err != nil {
		return err
	}
	return s.sync.fsyncDir(dir)
}

// removeFile removes path and syncs its directory; a missing file is not an
// error.
func (s *store) removeFile(path string) error {
	if err := removeUnsynced(path); err != nil {
		return err
	}
	return s.sync.fsyncDir(filepath.Dir(path))
}

// removeUnsynced removes path; a missing file is not an error.
func removeUnsynced(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
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
