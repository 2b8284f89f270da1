package hostpath

import (
	"context"
	"strconv"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// ControllerPublish support only records which node a volume is attached
// to: a local directory needs no attaching. It exists so that the proxy's
// tests can talk to a real peer that has PUBLISH_UNPUBLISH_VOLUME.

const (
	// publishContextNode is returned in publish_context.
	publishContextNode = "attachedTo"
	// publishContextReadonly carries ControllerPublishVolume.readonly to
	// NodePublishVolume (PUBLISH_READONLY).
	publishContextReadonly = "readonly"
)

// ControllerPublishVolume records an attachment to node_id. On node-local
// storage that must be the driver's own node id (Options.NodeID, what
// NodeGetInfo reports): it is the only node the driver knows exists, so any
// other id is NOT_FOUND, as CSI prescribes for "a node corresponding to the
// specified node_id does not exist"; attachments to other nodes come from
// other Drivers sharing the same BasePath, each publishing to its own node.
// On shared storage (Options.Shared) any node id is taken.
func (d *Driver) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	if !d.opts.ControllerPublish {
		return nil, unimplemented("ControllerPublishVolume is not enabled in this local-hostpath driver (PUBLISH_UNPUBLISH_VOLUME is not advertised)")
	}
	id, node := req.GetVolumeId(), req.GetNodeId()
	switch {
	case id == "":
		return nil, invalidArgument("volume_id is required")
	case node == "":
		return nil, invalidArgument("node_id is required")
	case req.GetVolumeCapability() == nil:
		return nil, invalidArgument("volume_capability is required")
	}
	if err := checkCapability("volume_capability", req.GetVolumeCapability()); err != nil {
		return nil, invalidArgument("%s", err)
	}
	id, err := d.volumeID(id)
	if err != nil {
		return nil, err
	}
	if !validVolumeID(id) {
		return nil, notFound("volume %q not found (volume_id is not a local-hostpath volume id)", id)
	}
	if !d.opts.Shared && node != d.opts.NodeID {
		return nil, notFound("node %q not found: this local-hostpath driver serves node %q (its NodeGetInfo node_id) and knows no other", node, d.opts.NodeID)
	}
	// The node key serialises publishes to one node, so that two volumes
	// cannot both take the last slot under MaxVolumesPerNode.
	unlock, err := d.locks.lock(ctx, id, "node/"+node)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, err := d.lookupVolume(id, "volume_id"); err != nil {
		return nil, err
	}

	want := attachment{
		NodeID:     node,
		Readonly:   req.GetReadonly(),
		AccessMode: req.GetVolumeCapability().GetAccessMode().GetMode().String(),
	}
	att, err := d.store.readAttachments(id)
	if err != nil {
		return nil, internalError(err, "read attachments of volume %s", id)
	}
	for _, a := range att.Nodes {
		switch {
		case a == want:
			return publishResponse(want), nil
		case a.NodeID == node:
			return nil, alreadyExists("volume %s is already published to node %q with readonly=%t and access mode %s, which differs from this request (readonly=%t, %s)",
				id, node, a.Readonly, a.AccessMode, want.Readonly, want.AccessMode)
		default:
			// Every supported access mode is single-node.
			return nil, failedPrecondition("volume %s is already published to node %q; its single-node access mode allows one node at a time", id, a.NodeID)
		}
	}
	if max := d.opts.MaxVolumesPerNode; max > 0 {
		n, err := d.attachedTo(node)
		if err != nil {
			return nil, err
		}
		if n >= max {
			return nil, resourceExhausted("node %q already has %d volume(s) published, the maximum (max_volumes_per_node)", node, n)
		}
	}
	att.Nodes = append(att.Nodes, want)
	if err := d.store.writeAttachments(att); err != nil {
		return nil, internalError(err, "write attachments of volume %s", id)
	}
	d.log.Info("published volume to node", "volume", id, "node", node, "readonly", want.Readonly)
	return publishResponse(want), nil
}

func publishResponse(a attachment) *csi.ControllerPublishVolumeResponse {
	pc := map[string]string{publishContextNode: a.NodeID}
	if a.Readonly {
		pc[publishContextReadonly] = strconv.FormatBool(true)
	}
	return &csi.ControllerPublishVolumeResponse{PublishContext: pc}
}

// attachedTo counts the volumes published to node.
func (d *Driver) attachedTo(node string) (int64, error) {
	all, err := d.store.listAttachments()
	if err != nil {
		return 0, internalError(err, "list attachments")
	}
	var n int64
	for _, a := range all {
		for _, x := range a.Nodes {
			if x.NodeID == node {
				n++
			}
		}
	}
	return n, nil
}

// ControllerUnpublishVolume removes the attachment record. A volume or node
// it does not know is already unpublished, which CSI says SHOULD be OK.
func (d *Driver) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	if !d.opts.ControllerPublish {
		return nil, unimplemented("ControllerUnpublishVolume is not enabled in this local-hostpath driver (PUBLISH_UNPUBLISH_VOLUME is not advertised)")
	}
	id, node := req.GetVolumeId(), req.GetNodeId()
	if id == "" {
		return nil, invalidArgument("volume_id is required")
	}
	id, err := d.volumeID(id)
	if err != nil {
		return nil, err
	}
	if !validVolumeID(id) {
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	keys := []string{id}
	if node != "" {
		keys = append(keys, "node/"+node)
	}
	unlock, err := d.locks.lock(ctx, keys...)
	if err != nil {
		return nil, err
	}
	defer unlock()
	att, err := d.store.readAttachments(id)
	if err != nil {
		return nil, internalError(err, "read attachments of volume %s", id)
	}
	kept := att.Nodes[:0:0]
	for _, a := range att.Nodes {
		if node != "" && a.NodeID != node {
			kept = append(kept, a)
		}
	}
	if len(kept) == len(att.Nodes) {
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	att.Nodes = kept
	if err := d.store.writeAttachments(att); err != nil {
		return nil, internalError(err, "write attachments of volume %s", id)
	}
	d.log.Info("unpublished volume from node", "volume", id, "node", node)
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}
