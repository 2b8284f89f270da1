package hostpath

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"k8s.io/mount-utils"
)

// The node service bind-mounts BasePath/volumes/<id> where the CO asks.
// Paths from the CO (target_path, staging_target_path, volume_path) must be
// absolute and are used as given: they belong to the CO, unlike everything
// under BasePath, which is only ever reached through validated IDs.
//
// Whether something is mounted is always read from the mount table
// (through mount-utils, see mount.go) and the inodes on disk, never from a
// record, so the node side needs no state of its own and is right after a
// restart or a reboot.

func (d *Driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	types := []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		// CSI 1.13 replaced the VOLUME_CONDITION capability with these.
		csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
		csi.NodeServiceCapability_RPC_GET_STORAGE_HEALTH,
	}
	if d.opts.Stage {
		types = append(types, csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	}
	caps := make([]*csi.NodeServiceCapability, len(types))
	for i, t := range types {
		caps[i] = &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{
			Rpc: &csi.NodeServiceCapability_RPC{Type: t},
		}}
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// NodeGetInfo reports no accessible_topology: where BasePath is reachable
// is the proxy's business (its connection topology), not the driver's.
func (d *Driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: d.opts.NodeID, MaxVolumesPerNode: d.opts.MaxVolumesPerNode}, nil
}

// checkCOPath validates a path the CO owns.
func checkCOPath(field, p string) error {
	switch {
	case p == "":
		return invalidArgument("%s is required", field)
	case !filepath.IsAbs(p):
		return invalidArgument("%s %q must be an absolute path", field, p)
	case strings.ContainsRune(p, 0):
		return invalidArgument("%s contains a NUL byte", field)
	}
	return nil
}

// nodeCapability validates the capability of a node RPC: malformed is
// INVALID_ARGUMENT, well-formed but unsupported is FAILED_PRECONDITION
// ("exceeds capabilities" in the CSI node error tables).
func nodeCapability(c *csi.VolumeCapability) error {
	if c == nil {
		return invalidArgument("volume_capability is required")
	}
	if err := checkCapability("volume_capability", c); err != nil {
		if err.malformed {
			return invalidArgument("%s", err)
		}
		return failedPrecondition("%s", err)
	}
	return nil
}

// nodeVolume looks up the volume of a node RPC and checks that its data is
// there to be mounted.
func (d *Driver) nodeVolume(id string) (dir string, err error) {
	rec, err := d.lookupVolume(id, "volume_id")
	if err != nil {
		return "", err
	}
	return d.volumeDir(rec)
}

func (d *Driver) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	if !d.opts.Stage {
		return nil, unimplemented("NodeStageVolume is not enabled in this local-hostpath driver (STAGE_UNSTAGE_VOLUME is not advertised)")
	}
	id, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	if id == "" {
		return nil, invalidArgument("volume_id is required")
	}
	if err := checkCOPath("staging_target_path", staging); err != nil {
		return nil, err
	}
	if err := nodeCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
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
	dir, err := d.nodeVolume(id)
	if err != nil {
		return nil, err
	}
	mounted, err := d.mounter.isMountPoint(staging)
	if err != nil {
		return nil, internalError(err, "check staging_target_path")
	}
	if mounted {
		if d.mounter.shows(staging, dir) {
			return &csi.NodeStageVolumeResponse{}, nil
		}
		return nil, alreadyExists("staging_target_path %s is already a mount point of something other than volume %s", staging, id)
	}
	// The staging mount is always read-write; read-only-ness and mount
	// flags are per publish, because one staged volume can be published
	// both ways.
	created, err := ensureMountDir(staging)
	if err != nil {
		return nil, internalError(err, "prepare staging_target_path")
	}
	if err := d.mounter.Mount(dir, staging, "", []string{"bind"}); err != nil {
		if created {
			os.Remove(staging)
		}
		return nil, internalError(err, "stage volume %s", id)
	}
	d.log.Info("staged volume", "volume", id, "stagingTargetPath", staging)
	return &csi.NodeStageVolumeResponse{}, nil
}

// NodeUnstageVolume unmounts staging_target_path and leaves the directory to
// the CO, which created it. Like NodeUnpublishVolume it does not require the
// volume to still exist: tearing down must always be possible.
func (d *Driver) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	if !d.opts.Stage {
		return nil, unimplemented("NodeUnstageVolume is not enabled in this local-hostpath driver (STAGE_UNSTAGE_VOLUME is not advertised)")
	}
	id, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	unlock, err := d.lockTeardown(ctx, id, "staging_target_path", staging)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := d.mounter.Unmount(staging); err != nil {
		return nil, internalError(err, "unstage volume %s", id)
	}
	d.log.Info("unstaged volume", "volume", id, "stagingTargetPath", staging)
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func (d *Driver) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	if id == "" {
		return nil, invalidArgument("volume_id is required")
	}
	if err := checkCOPath("target_path", target); err != nil {
		return nil, err
	}
	vc := req.GetVolumeCapability()
	if err := nodeCapability(vc); err != nil {
		return nil, err
	}
	_, roFlag, _ := mountFlags(vc.GetMount().GetMountFlags()) // validated by nodeCapability
	var staging string
	if d.opts.Stage {
		staging = req.GetStagingTargetPath()
		if staging == "" {
			return nil, failedPrecondition("staging_target_path is required: this driver stages volumes (STAGE_UNSTAGE_VOLUME), call NodeStageVolume first")
		}
		if err := checkCOPath("staging_target_path", staging); err != nil {
			return nil, err
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
	dir, err := d.nodeVolume(id)
	if err != nil {
		return nil, err
	}

	readonly := req.GetReadonly() || roFlag || readOnlyMode(vc) ||
		(d.opts.ControllerPublish && req.GetPublishContext()[publishContextReadonly] == "true")
	source := dir
	if staging != "" {
		mounted, err := d.mounter.isMountPoint(staging)
		if err != nil {
			return nil, internalError(err, "check staging_target_path")
		}
		if !mounted || !d.mounter.shows(staging, dir) {
			return nil, failedPrecondition("volume %s is not staged at staging_target_path %s; call NodeStageVolume first", id, staging)
		}
		source = staging
	}
	mounted, err := d.mounter.isMountPoint(target)
	if err != nil {
		return nil, internalError(err, "check target_path")
	}
	if mounted {
		if !d.mounter.shows(target, dir) {
			return nil, alreadyExists("target_path %s is already a mount point of something other than volume %s", target, id)
		}
		ro, err := d.mounter.readOnly(target)
		if err != nil {
			return nil, internalError(err, "check target_path")
		}
		if ro != readonly {
			return nil, alreadyExists("volume %s is already published at %s with readonly=%t, this request asks for readonly=%t", id, target, ro, readonly)
		}
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if vc.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER {
		skip := []string{resolvePath(target)}
		if staging != "" {
			skip = append(skip, resolvePath(staging))
		}
		refs, err := d.mounter.mountsOf(dir)
		if err != nil {
			return nil, internalError(err, "read mount table")
		}
		var others []string
		for _, p := range refs {
			if !slices.Contains(skip, p) {
				others = append(others, p)
			}
		}
		if len(others) > 0 {
			return nil, failedPrecondition("volume %s is already published at %s; access mode SINGLE_NODE_SINGLE_WRITER allows one target path", id, strings.Join(others, ", "))
		}
	}

	created, err := ensureMountDir(target)
	if err != nil {
		return nil, internalError(err, "prepare target_path")
	}
	// The capability's mount_flags go to the bind as they are ("ro",
	// "nosuid", ...), validated by nodeCapability.
	opts := append([]string{"bind"}, vc.GetMount().GetMountFlags()...)
	if readonly {
		opts = append(opts, "ro")
	}
	if err := d.mounter.Mount(source, target, "", opts); err != nil {
		if created {
			os.Remove(target)
		}
		return nil, internalError(err, "publish volume %s", id)
	}
	d.log.Info("published volume", "volume", id, "targetPath", target, "readonly", readonly)
	return &csi.NodePublishVolumeResponse{}, nil
}

// NodeUnpublishVolume unmounts target_path and removes it. It succeeds for
// any volume_id, known or not, when there is nothing (left) at the path: a
// CO must always be able to tear a pod down, even after the volume's record
// is gone, and a retry after a partial failure must succeed.
func (d *Driver) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	unlock, err := d.lockTeardown(ctx, id, "target_path", target)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// CleanupMountPoint unmounts and then removes target_path with
	// os.Remove, never RemoveAll: if the path still has content it is not
	// our mount, and deleting it could destroy data. A path that is already
	// gone (every retry) is checked here first only because
	// CleanupMountPoint logs a warning for it.
	if _, err := os.Lstat(target); errors.Is(err, fs.ErrNotExist) {
		return &csi.NodeUnpublishVolumeResponse{}, nil
	}
	switch err := mount.CleanupMountPoint(target, d.mounter, true); {
	case err == nil:
	case errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.EEXIST):
		return nil, failedPrecondition("target_path %s is not a mount point but is not empty; refusing to delete its content", target)
	default:
		return nil, internalError(err, "unpublish volume %s", id)
	}
	d.log.Info("unpublished volume", "volume", id, "targetPath", target)
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// volumeAt checks that path is absolute, exists and shows volume dir: the
// CSI "volume does not exist on the specified path" condition is NOT_FOUND.
func (d *Driver) volumeAt(field, path, id, dir string) error {
	if !filepath.IsAbs(path) {
		return notFound("volume %s is not at %s %q: not an absolute path", id, field, path)
	}
	if _, err := os.Stat(path); err != nil {
		return notFound("volume %s is not at %s %s: %v", id, field, path, err)
	}
	if !d.mounter.shows(path, dir) {
		return notFound("volume %s is not published or staged at %s %s", id, field, path)
	}
	return nil
}

// NodeGetVolumeStats reports the file system that holds the volume: sizes
// are not enforced, so what the pod can really use is what BasePath's file
// system has left.
func (d *Driver) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, invalidArgument("volume_id is required")
	}
	if req.GetVolumePath() == "" {
		return nil, invalidArgument("volume_path is required")
	}
	rec, err := d.lookupVolume(req.GetVolumeId(), "volume_id")
	if err != nil {
		return nil, err
	}
	path := req.GetVolumePath()
	if err := d.volumeAt("volume_path", path, rec.ID, d.store.volumePath(rec.ID)); err != nil {
		return nil, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return nil, internalError(err, "statfs %s", path)
	}
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{
			Unit:      csi.VolumeUsage_BYTES,
			Total:     mulClamp(st.Blocks, st.Bsize),
			Available: mulClamp(st.Bavail, st.Bsize),
			Used:      mulClamp(st.Blocks-st.Bfree, st.Bsize),
		},
		{
			Unit:      csi.VolumeUsage_INODES,
			Total:     mulClamp(st.Files, int64(1)),
			Available: mulClamp(st.Ffree, int64(1)),
			Used:      mulClamp(st.Files-st.Ffree, int64(1)),
		},
	}}, nil
}

// NodeExpandVolume has nothing to grow (ControllerExpandVolume already
// recorded the size); it confirms the volume is at volume_path and reports
// the recorded capacity.
func (d *Driver) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, invalidArgument("volume_id is required")
	}
	if req.GetVolumePath() == "" {
		return nil, invalidArgument("volume_path is required")
	}
	if c := req.GetVolumeCapability(); c != nil {
		if err := checkCapability("volume_capability", c); err != nil {
			return nil, invalidArgument("%s", err)
		}
	}
	if err := checkCapacityRange(req.GetCapacityRange()); err != nil {
		return nil, err
	}
	rec, err := d.lookupVolume(req.GetVolumeId(), "volume_id")
	if err != nil {
		return nil, err
	}
	if err := d.volumeAt("volume_path", req.GetVolumePath(), rec.ID, d.store.volumePath(rec.ID)); err != nil {
		return nil, err
	}
	if want := req.GetCapacityRange().GetRequiredBytes(); want > rec.CapacityBytes {
		return nil, outOfRange("volume %s has %d bytes, less than capacity_range.required_bytes %d; call ControllerExpandVolume first", rec.handle(), rec.CapacityBytes, want)
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: rec.CapacityBytes}, nil
}
