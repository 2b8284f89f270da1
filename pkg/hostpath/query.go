package hostpath

// The controller calls that only read: a volume's record, its
// capabilities, the listing and the capacity.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
)

// lookupVolume returns the record of a volume ID from a request. IDs that
// do not match the pattern are NOT_FOUND without touching the disk.
func (d *Driver) lookupVolume(id, field string) (*volumeRecord, error) {
	if id == "" {
		return nil, invalidArgument("%s is required", field)
	}
	handle := id
	id, err := d.volumeID(handle)
	if err != nil {
		return nil, err
	}
	if !validVolumeID(id) {
		return nil, notFound("volume %q not found (%s is not a local-hostpath volume id)", handle, field)
	}
	rec, err := d.store.readVolume(id)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, notFound("volume %s not found", id)
	}
	if err != nil {
		return nil, internalError(err, "read record of volume %s", id)
	}
	return rec, nil
}

func csiVolume(r *volumeRecord) *csi.Volume {
	return &csi.Volume{
		VolumeId:      r.handle(),
		CapacityBytes: r.CapacityBytes,
		ContentSource: contentSource{snapshotID: r.SourceSnapshotID, volumeID: r.SourceVolumeID}.proto(),
	}
}

func (d *Driver) ControllerGetVolume(ctx context.Context, req *csi.ControllerGetVolumeRequest) (*csi.ControllerGetVolumeResponse, error) {
	rec, err := d.lookupVolume(req.GetVolumeId(), "volume_id")
	if err != nil {
		return nil, err
	}
	st := &csi.ControllerGetVolumeResponse_VolumeStatus{}
	if d.opts.ControllerPublish {
		att, err := d.store.readAttachments(rec.ID)
		if err != nil {
			return nil, internalError(err, "read attachments of volume %s", rec.ID)
		}
		st.PublishedNodeIds = att.nodeIDs()
	}
	return &csi.ControllerGetVolumeResponse{Volume: csiVolume(rec), Status: st}, nil
}

func (d *Driver) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, invalidArgument("volume_id is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, invalidArgument("volume_capabilities is required")
	}
	if _, err := d.lookupVolume(req.GetVolumeId(), "volume_id"); err != nil {
		return nil, err
	}
	if err := checkCapabilities("volume_capabilities", req.GetVolumeCapabilities()); err != nil {
		if err.malformed {
			return nil, invalidArgument("%s", err)
		}
		return &csi.ValidateVolumeCapabilitiesResponse{Message: err.msg}, nil
	}
	if len(req.GetMutableParameters()) > 0 {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: "mutable_parameters are not supported by local-hostpath"}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

// page returns the part of items (sorted by id) that starts at token and
// holds at most max entries, and the token of the next page. Tokens are the
// ID of the first entry of a page, so deleting entries between calls never
// invalidates a token.
func page[T any](items []T, id func(T) string, token string, max int32) ([]T, string) {
	start := sort.Search(len(items), func(i int) bool { return id(items[i]) >= token })
	end, next := len(items), ""
	if max > 0 && len(items)-start > int(max) {
		end = start + int(max)
		next = id(items[end])
	}
	return items[start:end], next
}

// listVolumeRecords checks a volume listing's max_entries and starting
// token (a volume ID) and returns every volume record, for page.
func (d *Driver) listVolumeRecords(maxEntries int32, token string) ([]*volumeRecord, error) {
	if maxEntries < 0 {
		return nil, invalidArgument("max_entries %d must not be negative", maxEntries)
	}
	if token != "" && !validVolumeID(token) {
		return nil, abortedToken(token)
	}
	recs, err := d.store.listVolumes()
	if err != nil {
		return nil, internalError(err, "list volumes")
	}
	return recs, nil
}

func (d *Driver) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	recs, err := d.listVolumeRecords(req.GetMaxEntries(), req.GetStartingToken())
	if err != nil {
		return nil, err
	}
	published := map[string][]string{}
	if d.opts.ControllerPublish {
		atts, err := d.store.listAttachments()
		if err != nil {
			return nil, internalError(err, "list attachments")
		}
		for _, a := range atts {
			published[a.VolumeID] = a.nodeIDs()
		}
	}
	recs, next := page(recs, func(r *volumeRecord) string { return r.ID }, req.GetStartingToken(), req.GetMaxEntries())
	resp := &csi.ListVolumesResponse{NextToken: next}
	for _, r := range recs {
		e := &csi.ListVolumesResponse_Entry{Volume: csiVolume(r)}
		if d.opts.ControllerPublish {
			// Required with LIST_VOLUMES_PUBLISHED_NODES, even when empty.
			e.Status = &csi.ListVolumesResponse_VolumeStatus{PublishedNodeIds: published[r.ID]}
		}
		resp.Entries = append(resp.Entries, e)
	}
	return resp, nil
}

// GetCapacity reports the free space of the file system holding BasePath;
// every volume draws from it since sizes are not enforced. Capabilities the
// driver cannot serve get 0, as CSI asks.
func (d *Driver) GetCapacity(ctx context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	for i, c := range req.GetVolumeCapabilities() {
		if err := checkCapability(fmt.Sprintf("volume_capabilities[%d]", i), c); err != nil {
			if err.malformed {
				return nil, invalidArgument("%s", err)
			}
			return &csi.GetCapacityResponse{AvailableCapacity: 0}, nil
		}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(d.opts.BasePath, &st); err != nil {
		return nil, internalError(err, "statfs %s", d.opts.BasePath)
	}
	return &csi.GetCapacityResponse{AvailableCapacity: mulClamp(st.Bavail, st.Bsize)}, nil
}

func abortedToken(token string) error {
	return aborted("starting_token %q is not valid; start listing again without a token", token)
}
