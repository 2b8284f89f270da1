package hostpath

import (
	"context"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// defaultCapacity is granted when the CO gives no capacity_range.
const defaultCapacity int64 = 1 << 30

// volumeDataPerm is the mode of a new, empty volume's root. World-writable
// because Kubernetes does not apply fsGroup to CSI volumes without an
// fsType, so a pod running as any non-root user must be able to write; the
// host side stays closed because BasePath itself is 0750.
const volumeDataPerm = 0o777

func (d *Driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	types := []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY,
		csi.ControllerServiceCapability_RPC_GET_VOLUME,
		csi.ControllerServiceCapability_RPC_GET_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		// CSI 1.13 replaced the VOLUME_CONDITION capability with these.
		csi.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH,
		csi.ControllerServiceCapability_RPC_LIST_VOLUME_HEALTH,
	}
	if d.opts.ControllerPublish {
		types = append(types,
			csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
			csi.ControllerServiceCapability_RPC_PUBLISH_READONLY,
			csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES,
		)
	}
	caps := make([]*csi.ControllerServiceCapability, len(types))
	for i, t := range types {
		caps[i] = &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{
			Rpc: &csi.ControllerServiceCapability_RPC{Type: t},
		}}
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// contentSource is a validated CreateVolume volume_content_source. The IDs
// are as the CO sent them; they are checked against the ID patterns before
// any path is built from them.
type contentSource struct {
	snapshotID string
	volumeID   string
}

func (s contentSource) empty() bool { return s.snapshotID == "" && s.volumeID == "" }

func (s contentSource) String() string {
	switch {
	case s.snapshotID != "":
		return "snapshot " + s.snapshotID
	case s.volumeID != "":
		return "volume " + s.volumeID
	}
	return "no content source"
}

// lockKeys returns the source's ID when it can be one of ours, so that the
// source cannot be deleted while it is being copied.
func (s contentSource) lockKeys() []string {
	switch {
	case validSnapshotID(s.snapshotID):
		return []string{s.snapshotID}
	case validVolumeID(volumeIDOf(s.volumeID)):
		return []string{volumeIDOf(s.volumeID)}
	}
	return nil
}

func (s contentSource) proto() *csi.VolumeContentSource {
	switch {
	case s.snapshotID != "":
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: s.snapshotID},
		}}
	case s.volumeID != "":
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
			Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: s.volumeID},
		}}
	}
	return nil
}

func validateCreateVolumeRequest(req *csi.CreateVolumeRequest) (contentSource, error) {
	var src contentSource
	if req.GetName() == "" {
		return src, invalidArgument("name is required")
	}
	if err := checkCapabilities("volume_capabilities", req.GetVolumeCapabilities()); err != nil {
		return src, invalidArgument("%s", err)
	}
	if len(req.GetMutableParameters()) > 0 {
		return src, invalidArgument("mutable_parameters are not supported: local-hostpath does not implement ControllerModifyVolume")
	}
	if cs := req.GetVolumeContentSource(); cs != nil {
		switch t := cs.GetType().(type) {
		case *csi.VolumeContentSource_Snapshot:
			if src.snapshotID = t.Snapshot.GetSnapshotId(); src.snapshotID == "" {
				return src, invalidArgument("volume_content_source.snapshot.snapshot_id is required")
			}
		case *csi.VolumeContentSource_Volume:
			if src.volumeID = t.Volume.GetVolumeId(); src.volumeID == "" {
				return src, invalidArgument("volume_content_source.volume.volume_id is required")
			}
		default:
			return src, invalidArgument("volume_content_source must be a snapshot or a volume")
		}
	}
	return src, nil
}

// requestedCapacity applies capacity_range to a new volume. explicit says
// whether the CO asked for a size (required_bytes) rather than getting the
// default.
func requestedCapacity(cr *csi.CapacityRange) (capacity int64, explicit bool, err error) {
	if err := checkCapacityRange(cr); err != nil {
		return 0, false, err
	}
	req, lim := cr.GetRequiredBytes(), cr.GetLimitBytes()
	switch {
	case req > 0:
		return req, true, nil
	case lim > 0 && lim < defaultCapacity:
		return lim, false, nil
	}
	return defaultCapacity, false, nil
}

func checkCapacityRange(cr *csi.CapacityRange) error {
	req, lim := cr.GetRequiredBytes(), cr.GetLimitBytes()
	switch {
	case req < 0:
		return invalidArgument("capacity_range.required_bytes %d must not be negative", req)
	case lim < 0:
		return invalidArgument("capacity_range.limit_bytes %d must not be negative", lim)
	case lim > 0 && lim < req:
		return invalidArgument("capacity_range.limit_bytes %d is smaller than required_bytes %d", lim, req)
	}
	return nil
}

// capacityFits reports whether an existing volume of size satisfies cr.
func capacityFits(size int64, cr *csi.CapacityRange) bool {
	return size >= cr.GetRequiredBytes() && (cr.GetLimitBytes() == 0 || size <= cr.GetLimitBytes())
}

// CreateVolume makes BasePath/volumes/<id>, empty or as a copy of a snapshot
// or volume. Parameters are accepted and ignored (the driver has none, and
// the external-provisioner may add its own metadata keys), so they do not
// take part in the idempotency check either.
func (d *Driver) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	src, err := validateCreateVolumeRequest(req)
	if err != nil {
		return nil, err
	}
	capacity, explicit, err := requestedCapacity(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	id := volumeIDFor(req.GetName())
	unlock, err := d.locks.lock(ctx, append([]string{id}, src.lockKeys()...)...)
	if err != nil {
		return nil, err
	}
	defer unlock()

	existing, err := d.store.readVolume(id)
	switch {
	case err == nil:
		if err := existingVolumeMatches(existing, req, src); err != nil {
			return nil, err
		}
		return &csi.CreateVolumeResponse{Volume: csiVolume(existing)}, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, internalError(err, "read record of volume %s", id)
	}

	srcDir, srcSize, err := d.resolveSource(src, "")
	if err != nil {
		return nil, err
	}
	if !src.empty() {
		// CSI: a volume made from a source must hold all of it. Without a
		// requested size it gets exactly the source's size, the least
		// surprising default for a copy.
		lim := req.GetCapacityRange().GetLimitBytes()
		switch {
		case explicit && capacity < srcSize:
			return nil, outOfRange("capacity_range.required_bytes %d is smaller than the %d bytes of source %s", capacity, srcSize, src)
		case lim > 0 && srcSize > lim:
			return nil, outOfRange("capacity_range.limit_bytes %d is smaller than the %d bytes of source %s", lim, srcSize, src)
		case !explicit:
			capacity = srcSize
		}
	}

	rec := &volumeRecord{
		ID:               id,
		Name:             req.GetName(),
		CapacityBytes:    capacity,
		SourceSnapshotID: src.snapshotID,
		SourceVolumeID:   src.volumeID,
		Parameters:       req.GetParameters(),
		CreatedAt:        time.Now().UTC(),
		Fingerprint:      d.marker.Fingerprint,
	}
	if err := d.createVolumeData(ctx, rec, srcDir, src); err != nil {
		return nil, err
	}
	d.log.Info("created volume", "volume", id, "name", rec.Name, "capacityBytes", capacity, "source", src.String())
	return &csi.CreateVolumeResponse{Volume: csiVolume(rec)}, nil
}

// existingVolumeMatches implements CreateVolume idempotency: the same name
// with a compatible request returns the existing volume, anything else is
// ALREADY_EXISTS with the difference spelled out.
func existingVolumeMatches(existing *volumeRecord, req *csi.CreateVolumeRequest, src contentSource) error {
	if existing.Name != req.GetName() {
		// 128-bit hash collision; never expected, but never return
		// another name's volume.
		return alreadyExists("volume id %s of name %q is taken by name %q", existing.ID, req.GetName(), existing.Name)
	}
	if !capacityFits(existing.CapacityBytes, req.GetCapacityRange()) {
		return alreadyExists("volume %q already exists (%s) with %d bytes, which does not fit capacity_range required_bytes=%d limit_bytes=%d",
			req.GetName(), existing.ID, existing.CapacityBytes, req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes())
	}
	have := contentSource{snapshotID: existing.SourceSnapshotID, volumeID: existing.SourceVolumeID}
	if have != src {
		return alreadyExists("volume %q already exists (%s) from %s, not from %s", req.GetName(), existing.ID, have, src)
	}
	return nil
}

// resolveSource finds the directory and size of a content source. field
// names the request field in messages; empty means volume_content_source.
func (d *Driver) resolveSource(src contentSource, field string) (dir string, size int64, err error) {
	switch {
	case src.snapshotID != "":
		if field == "" {
			field = "volume_content_source.snapshot.snapshot_id"
		}
		snap, err := d.lookupSnapshot(src.snapshotID, field)
		if err != nil {
			return "", 0, err
		}
		dir = d.store.snapshotPath(snap.ID)
		size = snap.SizeBytes
	case src.volumeID != "":
		if field == "" {
			field = "volume_content_source.volume.volume_id"
		}
		vol, err := d.lookupVolume(src.volumeID, field)
		if err != nil {
			return "", 0, err
		}
		dir = d.store.volumePath(vol.ID)
		size = vol.CapacityBytes
		if _, err := os.Lstat(dir); os.IsNotExist(err) && vol.DataOnFirstUse && !d.store.made(vol.ID) {
			return "", size, nil // never published: empty
		}
	default:
		return "", 0, nil
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "", 0, failedPrecondition("%s has a record but its data directory %s is missing or unreadable", src, dir)
	}
	return dir, size, nil
}

// placeData builds a volume's or snapshot's data in the work area (empty,
// or a copy of srcDir, every file and directory of it synced) and renames
// it to dest, unsynced. Data left at dest without a record by an earlier
// failure is moved aside first. On failure nothing is left.
func (d *Driver) placeData(ctx context.Context, kind, id, srcDir, dest string) error {
	s := d.store
	tmp := s.workPath(kind + "-" + id)
	if srcDir != "" {
		if err := copyTree(ctx, srcDir, tmp); err != nil {
			removeTree(tmp)
			return internalError(err, "copy content of %s %s", kind, id)
		}
		// Every file and directory of the copy is synced before it is
		// published (on a journalling file system the first fsync commits
		// them all and the rest find nothing to do).
		if err := s.sync.syncTree(tmp); err != nil {
			removeTree(tmp)
			return internalError(err, "sync the copy of %s %s", kind, id)
		}
	} else {
		if err := s.mkdir(tmp); err != nil {
			return internalError(err, "create %s %s", kind, id)
		}
	}
	if err := d.clearStale(kind, id, dest); err != nil {
		removeTree(tmp)
		return err
	}
	if err := s.rename(tmp, dest); err != nil {
		removeTree(tmp)
		return internalError(err, "move new %s %s into place", kind, id)
	}
	return nil
}

// clearStale moves aside data without a record at dest: what a create or
// delete that never returned leaves. No one can be using it, because every
// RPC needs the record.
func (d *Driver) clearStale(kind, id, dest string) error {
	if _, err := os.Lstat(dest); err != nil {
		return nil
	}
	d.log.Warn("replacing data left without a record by an earlier failure", "kind", kind, "id", id)
	if err := d.store.trash(dest, "stale-"+id); err != nil {
		return internalError(err, "move aside stale data of %s %s", kind, id)
	}
	return nil
}

// createVolumeData makes a new volume durable (docs/reliability.md §10):
// an empty one is a journal entry alone, its directory made at first use
// (Driver.volumeDir); a copy is placed and synced with its parent before
// its entry is appended. A failure leaves nothing behind.
func (d *Driver) createVolumeData(ctx context.Context, rec *volumeRecord, srcDir string, src contentSource) error {
	s := d.store
	dest := s.volumePath(rec.ID)
	if src.empty() {
		rec.DataOnFirstUse = true
		if err := d.clearStale("volume", rec.ID, dest); err != nil {
			return err
		}
	} else {
		if err := d.placeData(ctx, "volume", rec.ID, srcDir, dest); err != nil {
			return err
		}
		window("data-placed")
		if err := s.sync.commit(nil, dest, filepath.Dir(dest)); err != nil {
			d.undoCreate("volume", rec.ID, dest, "")
			return internalError(err, "sync volume %s", rec.ID)
		}
	}
	if err := s.change(ctx, &journalEntry{Op: opPut, ID: rec.ID, Volume: rec}); err != nil {
		if !src.empty() {
			d.undoCreate("volume", rec.ID, dest, "")
		}
		return internalError(err, "record volume %s", rec.ID)
	}
	return nil
}

// materialize builds a snapshot in the work area (a copy of srcDir, or
// empty), renames it to dest, publishes its record (rec, in the record
// directory of kind) and returns once both are durable. The order is what
// recovery relies on (docs/reliability.md §10): data renamed into place
// before the record, and the call acknowledged only after the record, the
// new directory and both parents have been synced. Anything that fails is
// undone, so a failed create leaves nothing behind and a retry starts
// clean.
func (d *Driver) materialize(ctx context.Context, kind, id, srcDir, dest string, rec any) error {
	s := d.store
	recKind := kind + "s"
	if err := d.placeData(ctx, kind, id, srcDir, dest); err != nil {
		return err
	}
	window("data-placed")
	f, err := s.createRecord(recKind, id, rec)
	if err != nil {
		d.undoCreate(kind, id, dest, "")
		return internalError(err, "write record of %s %s", kind, id)
	}
	// fsync of the record file, of the new data directory and of both
	// parents is what makes a new entry durable on any file system that
	// implements fsync as POSIX describes it (docs/reliability.md §10).
	dirs := []string{dest, filepath.Dir(dest), s.metaDir(recKind)}
	if err := s.sync.commit([]*os.File{f}, dirs...); err != nil {
		d.undoCreate(kind, id, dest, s.recordPath(recKind, id))
		return internalError(err, "sync %s %s", kind, id)
	}
	return nil
}

// undoCreate removes what a failed create published: the record first, then
// the data (the order of a delete).
func (d *Driver) undoCreate(kind, id, dest, record string) {
	if record != "" {
		if err := removeUnsynced(record); err != nil {
			d.log.Error("cannot undo failed create; the record stays", "kind", kind, "id", id, "error", err)
			return
		}
	}
	if err := d.store.trash(dest, "undo-"+id); err != nil {
		d.log.Error("cannot undo failed create; data stays without a record", "kind", kind, "id", id, "error", err)
	}
}

// dispose removes a snapshot's record and then its data, with no sync: a
// snapshot's delete is idempotent (docs/reliability.md §10). Between the
// two steps the data is invisible (every RPC needs the record); the data is
// moved into the work area before it is removed, so it is never seen
// half-deleted, and what removal leaves is purged by the next Driver to
// start. It reports whether there was a record to remove.
func (d *Driver) dispose(kind, id, dataPath, record string) (existed bool, err error) {
	err = os.Remove(record)
	switch {
	case err == nil:
		existed = true
	case !errors.Is(err, fs.ErrNotExist):
		return false, internalError(err, "remove record of %s %s", kind, id)
	}
	window("record-removed")
	if err := d.store.trash(dataPath, "delete-"+id); err != nil {
		return existed, internalError(err, "move data of %s %s aside", kind, id)
	}
	return existed, nil
}

// deleteVolumeData removes a volume: its delete entry is durable in the
// journal before the call returns (a delete that was acknowledged never
// comes back), then its directory, if it was ever made, is moved aside and
// removed. It reports whether the volume had a record.
func (d *Driver) deleteVolumeData(ctx context.Context, id, dataPath string) (existed bool, err error) {
	existed, err = d.store.exists(id)
	if err != nil {
		return false, internalError(err, "read record of volume %s", id)
	}
	if existed {
		if err := d.store.change(ctx, &journalEntry{Op: opDelete, ID: id}); err != nil {
			return false, internalError(err, "record the delete of volume %s", id)
		}
	}
	window("record-removed")
	if err := d.store.trash(dataPath, "delete-"+id); err != nil {
		return existed, internalError(err, "move data of volume %s aside", id)
	}
	if err := removeUnsynced(d.store.madePath(id)); err != nil {
		return existed, internalError(err, "remove %s", d.store.madePath(id))
	}
	return existed, nil
}

func (d *Driver) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, invalidArgument("volume_id is required")
	}
	// A volume made under another base path is not "already deleted":
	// it is still there (marker.go).
	id, err := d.volumeID(id)
	if err != nil {
		return nil, err
	}
	if !validVolumeID(id) {
		// Not ours, so it cannot exist: deleting is a no-op (CSI: MUST
		// reply OK for a volume that does not exist).
		d.log.Debug("DeleteVolume of an id that is not a local-hostpath volume id", "volume", id)
		return &csi.DeleteVolumeResponse{}, nil
	}
	unlock, err := d.locks.lock(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()

	att, err := d.store.readAttachments(id)
	if err != nil {
		return nil, internalError(err, "read attachments of volume %s", id)
	}
	if len(att.Nodes) > 0 {
		return nil, failedPrecondition("volume %s is still published to node(s) %s; call ControllerUnpublishVolume first", id, strings.Join(att.nodeIDs(), ", "))
	}
	// Removing the directory under a live bind mount would wipe a running
	// pod's data, and a mount below it would let RemoveAll cross into
	// another file system. Only this process's mount namespace is visible:
	// a controller in its own container relies on the CO having unpublished
	// first, as CSI requires.
	path := d.store.volumePath(id)
	mentioned, err := d.mounter.mentions(id)
	if err != nil {
		return nil, internalError(err, "read mount table")
	}
	if mentioned {
		in, err := d.mounter.mountsOf(path)
		if err != nil {
			return nil, internalError(err, "read mount table")
		}
		below, err := d.mounter.mountsBelow(path)
		if err != nil {
			return nil, internalError(err, "read mount table")
		}
		if in = append(in, below...); len(in) > 0 {
			return nil, failedPrecondition("volume %s is still mounted at %s", id, strings.Join(in, ", "))
		}
	}
	existed, err := d.deleteVolumeData(ctx, id, path)
	if err != nil {
		return nil, err
	}
	if existed {
		d.log.Info("deleted volume", "volume", id)
	}
	return &csi.DeleteVolumeResponse{}, nil
}

// ControllerExpandVolume records the new size; there is nothing to grow on
// disk, so node expansion is never required. Shrinking is not expansion:
// a request whose limit is below the current size is OUT_OF_RANGE, while one
// already satisfied by the current size succeeds unchanged (CSI idempotency).
func (d *Driver) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, invalidArgument("volume_id is required")
	}
	cr := req.GetCapacityRange()
	if cr == nil {
		return nil, invalidArgument("capacity_range is required")
	}
	if err := checkCapacityRange(cr); err != nil {
		return nil, err
	}
	if cr.GetRequiredBytes() == 0 && cr.GetLimitBytes() == 0 {
		return nil, invalidArgument("capacity_range must set required_bytes or limit_bytes")
	}
	if c := req.GetVolumeCapability(); c != nil {
		if err := checkCapability("volume_capability", c); err != nil {
			return nil, invalidArgument("%s", err)
		}
	}
	id, err := d.volumeID(id)
	if err != nil {
		return nil, err
	}
	unlock, err := d.lockVolume(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	rec, err := d.lookupVolume(id, "volume_id")
	if err != nil {
		return nil, err
	}
	if lim := cr.GetLimitBytes(); lim > 0 && rec.CapacityBytes > lim {
		return nil, outOfRange("volume %s already has %d bytes, more than capacity_range.limit_bytes %d; volumes cannot shrink", id, rec.CapacityBytes, lim)
	}
	if want := cr.GetRequiredBytes(); want > rec.CapacityBytes {
		old := rec.CapacityBytes
		rec.CapacityBytes = want
		if err := d.store.change(ctx, &journalEntry{Op: opPut, ID: id, Volume: rec}); err != nil {
			return nil, internalError(err, "record the new size of volume %s", id)
		}
		d.log.Info("expanded volume", "volume", id, "fromBytes", old, "toBytes", want)
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: rec.CapacityBytes, NodeExpansionRequired: false}, nil
}

// mulClamp returns a*b as int64, clamped to MaxInt64 instead of wrapping.
func mulClamp[B int64 | uint32 | int32](a uint64, b B) int64 {
	if b <= 0 {
		return 0
	}
	if a > uint64(math.MaxInt64)/uint64(b) {
		return math.MaxInt64
	}
	return int64(a * uint64(b))
}
