package hostpath

import (
	"context"
	"errors"
	"io/fs"
	"os"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
)

// Volume health replaces the VolumeCondition of older CSI versions (removed
// in CSI 1.13 in favour of the GET_VOLUME_HEALTH family). The one thing that
// can go wrong with a directory volume short of the whole file system is the
// directory itself disappearing or being replaced.

func (d *Driver) dataHealth(rec *volumeRecord) []*csi.VolumeHealth_VolumeHealthEntry {
	id := rec.ID
	path := d.store.volumePath(id)
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && rec.DataOnFirstUse && !d.store.made(id):
		return nil // made at first use; never published yet
	case errors.Is(err, fs.ErrNotExist):
		return []*csi.VolumeHealth_VolumeHealthEntry{{
			Status:  csi.VolumeHealthErrorType_INACCESSIBLE,
			Reason:  "DataDirectoryMissing",
			Message: "data directory " + path + " of volume " + id + " does not exist",
		}}
	case err != nil:
		return []*csi.VolumeHealth_VolumeHealthEntry{{
			Status:  csi.VolumeHealthErrorType_INACCESSIBLE,
			Reason:  "DataDirectoryUnreadable",
			Message: err.Error(),
		}}
	case !fi.IsDir():
		return []*csi.VolumeHealth_VolumeHealthEntry{{
			Status:  csi.VolumeHealthErrorType_INACCESSIBLE,
			Reason:  "DataDirectoryNotADirectory",
			Message: "data path " + path + " of volume " + id + " is a " + fi.Mode().Type().String() + ", not a directory",
		}}
	}
	return nil
}

func (d *Driver) ControllerGetVolumeHealth(ctx context.Context, req *csi.ControllerGetVolumeHealthRequest) (*csi.ControllerGetVolumeHealthResponse, error) {
	rec, err := d.lookupVolume(req.GetVolumeId(), "volume_id")
	if err != nil {
		return nil, err
	}
	return &csi.ControllerGetVolumeHealthResponse{VolumeHealth: &csi.VolumeHealth{
		VolumeId:       rec.handle(),
		HealthStatuses: d.dataHealth(rec),
	}}, nil
}

// ControllerListVolumeHealth lists only volumes with a problem, as the spec
// recommends; pagination tokens are volume IDs like ListVolumes'.
func (d *Driver) ControllerListVolumeHealth(ctx context.Context, req *csi.ControllerListVolumeHealthRequest) (*csi.ControllerListVolumeHealthResponse, error) {
	recs, err := d.listVolumeRecords(req.GetMaxEntries(), req.GetStartingToken())
	if err != nil {
		return nil, err
	}
	var sick []*csi.VolumeHealth
	for _, r := range recs {
		if h := d.dataHealth(r); len(h) > 0 {
			sick = append(sick, &csi.VolumeHealth{VolumeId: r.handle(), HealthStatuses: h})
		}
	}
	// Tokens are volume IDs, as ListVolumes', not handles.
	entries, next := page(sick, func(h *csi.VolumeHealth) string { id, _ := splitVolumeHandle(h.GetVolumeId()); return id }, req.GetStartingToken(), req.GetMaxEntries())
	return &csi.ControllerListVolumeHealthResponse{Entries: entries, NextToken: next}, nil
}

// NodeGetVolumeHealth adds to the data check whether the paths the CO
// passed still show the volume, which is what a pod actually sees.
func (d *Driver) NodeGetVolumeHealth(ctx context.Context, req *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	rec, err := d.lookupVolume(req.GetVolumeId(), "volume_id")
	if err != nil {
		return nil, err
	}
	entries := d.dataHealth(rec)
	if len(entries) == 0 {
		dir := d.store.volumePath(rec.ID)
		for _, p := range []struct{ path, reason, what string }{
			{req.GetVolumePublishPath(), "NotPublished", "volume_publish_path"},
			{req.GetStagingTargetPath(), "NotStaged", "staging_target_path"},
		} {
			if p.path != "" && !d.mounter.shows(p.path, dir) {
				entries = append(entries, &csi.VolumeHealth_VolumeHealthEntry{
					Status:  csi.VolumeHealthErrorType_INACCESSIBLE,
					Reason:  p.reason,
					Message: p.what + " " + p.path + " does not show volume " + rec.handle(),
				})
			}
		}
	}
	return &csi.NodeGetVolumeHealthResponse{VolumeHealth: &csi.VolumeHealth{VolumeId: rec.handle(), HealthStatuses: entries}}, nil
}

// NodeGetStorageHealth reports BasePath's file system: gone (unreachable)
// or read-only (degraded: existing volumes read, nothing can be created).
func (d *Driver) NodeGetStorageHealth(ctx context.Context, req *csi.NodeGetStorageHealthRequest) (*csi.NodeGetStorageHealthResponse, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(d.store.volumesDir(), &st); err != nil {
		return &csi.NodeGetStorageHealthResponse{BackendHealth: []*csi.NodeGetStorageHealthResponse_StorageBackendHealth{{
			Status:  csi.StorageHealthErrorType_STORAGE_UNREACHABLE,
			Reason:  "BasePathUnavailable",
			Message: "statfs " + d.store.volumesDir() + ": " + err.Error(),
		}}}, nil
	}
	if st.Flags&unix.ST_RDONLY != 0 {
		return &csi.NodeGetStorageHealthResponse{BackendHealth: []*csi.NodeGetStorageHealthResponse_StorageBackendHealth{{
			Status:  csi.StorageHealthErrorType_STORAGE_DEGRADED,
			Reason:  "BasePathReadOnly",
			Message: "the file system of " + d.opts.BasePath + " is mounted read-only",
		}}}, nil
	}
	return &csi.NodeGetStorageHealthResponse{}, nil
}
