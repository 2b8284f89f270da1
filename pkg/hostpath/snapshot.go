package hostpath

import (
	"context"
	"errors"
	"io/fs"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Snapshots are full copies, independent of their source: deleting the
// volume keeps its snapshots usable and vice versa (what CSI recommends).
// A copy of a volume in use is not crash-consistent; quiesce the workload
// when that matters.

func (d *Driver) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	if req.GetName() == "" {
		return nil, invalidArgument("name is required")
	}
	srcID := req.GetSourceVolumeId()
	if srcID == "" {
		return nil, invalidArgument("source_volume_id is required")
	}
	id := snapshotIDFor(req.GetName())
	keys := []string{id}
	if validVolumeID(volumeIDOf(srcID)) {
		keys = append(keys, volumeIDOf(srcID)) // keep the source from being deleted mid-copy
	}
	unlock, err := d.locks.lock(ctx, keys...)
	if err != nil {
		return nil, err
	}
	defer unlock()

	existing, err := d.store.readSnapshot(id)
	switch {
	case err == nil:
		if existing.Name != req.GetName() {
			return nil, alreadyExists("snapshot id %s of name %q is taken by name %q", id, req.GetName(), existing.Name)
		}
		if existing.SourceVolumeID != srcID {
			return nil, alreadyExists("snapshot %q already exists (%s) of volume %s, not of volume %s", req.GetName(), id, existing.SourceVolumeID, srcID)
		}
		return &csi.CreateSnapshotResponse{Snapshot: csiSnapshot(existing)}, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, internalError(err, "read record of snapshot %s", id)
	}

	srcDir, size, err := d.resolveSource(contentSource{volumeID: srcID}, "source_volume_id")
	if err != nil {
		return nil, err
	}
	rec := &snapshotRecord{
		ID:             id,
		Name:           req.GetName(),
		SourceVolumeID: srcID,
		SizeBytes:      size,
		CreatedAt:      time.Now().UTC(),
	}
	if err := d.materialize(ctx, "snapshot", id, srcDir, d.store.snapshotPath(id), rec); err != nil {
		return nil, err
	}
	d.log.Info("created snapshot", "snapshot", id, "name", rec.Name, "sourceVolume", srcID, "sizeBytes", size)
	return &csi.CreateSnapshotResponse{Snapshot: csiSnapshot(rec)}, nil
}

func (d *Driver) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	id := req.GetSnapshotId()
	if id == "" {
		return nil, invalidArgument("snapshot_id is required")
	}
	if !validSnapshotID(id) {
		d.log.Debug("DeleteSnapshot of an id that is not a local-hostpath snapshot id", "snapshot", id)
		return &csi.DeleteSnapshotResponse{}, nil
	}
	unlock, err := d.locks.lock(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	existed, err := d.dispose("snapshot", id, d.store.snapshotPath(id), d.store.recordPath("snapshots", id))
	if err != nil {
		return nil, err
	}
	if existed {
		d.log.Info("deleted snapshot", "snapshot", id)
	}
	return &csi.DeleteSnapshotResponse{}, nil
}

func (d *Driver) ListSnapshots(ctx context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, invalidArgument("max_entries %d must not be negative", req.GetMaxEntries())
	}
	if t := req.GetStartingToken(); t != "" && !validSnapshotID(t) {
		return nil, abortedToken(t)
	}
	var recs []*snapshotRecord
	switch id := req.GetSnapshotId(); {
	case id != "":
		// A filter that names a snapshot we cannot have matches nothing
		// (CSI: an empty list, not an error).
		if !validSnapshotID(id) {
			return &csi.ListSnapshotsResponse{}, nil
		}
		rec, err := d.store.readSnapshot(id)
		if errors.Is(err, fs.ErrNotExist) {
			return &csi.ListSnapshotsResponse{}, nil
		}
		if err != nil {
			return nil, internalError(err, "read record of snapshot %s", id)
		}
		recs = []*snapshotRecord{rec}
	default:
		all, err := d.store.listSnapshots()
		if err != nil {
			return nil, internalError(err, "list snapshots")
		}
		recs = all
	}
	if src := req.GetSourceVolumeId(); src != "" {
		kept := recs[:0:0]
		for _, r := range recs {
			if r.SourceVolumeID == src {
				kept = append(kept, r)
			}
		}
		recs = kept
	}
	recs, next := page(recs, func(r *snapshotRecord) string { return r.ID }, req.GetStartingToken(), req.GetMaxEntries())
	resp := &csi.ListSnapshotsResponse{NextToken: next}
	for _, r := range recs {
		resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: csiSnapshot(r)})
	}
	return resp, nil
}

func (d *Driver) GetSnapshot(ctx context.Context, req *csi.GetSnapshotRequest) (*csi.GetSnapshotResponse, error) {
	rec, err := d.lookupSnapshot(req.GetSnapshotId(), "snapshot_id")
	if err != nil {
		return nil, err
	}
	return &csi.GetSnapshotResponse{Snapshot: csiSnapshot(rec)}, nil
}

// lookupSnapshot is lookupVolume for snapshots.
func (d *Driver) lookupSnapshot(id, field string) (*snapshotRecord, error) {
	if id == "" {
		return nil, invalidArgument("%s is required", field)
	}
	if !validSnapshotID(id) {
		return nil, notFound("snapshot %q not found (%s is not a local-hostpath snapshot id)", id, field)
	}
	rec, err := d.store.readSnapshot(id)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, notFound("snapshot %s not found", id)
	}
	if err != nil {
		return nil, internalError(err, "read record of snapshot %s", id)
	}
	return rec, nil
}

// csiSnapshot reports a snapshot; copies are complete before the record
// exists, so every snapshot is ready to use.
func csiSnapshot(r *snapshotRecord) *csi.Snapshot {
	return &csi.Snapshot{
		SnapshotId:     r.ID,
		SourceVolumeId: r.SourceVolumeID,
		SizeBytes:      r.SizeBytes,
		CreationTime:   timestamppb.New(r.CreatedAt),
		ReadyToUse:     true,
	}
}
