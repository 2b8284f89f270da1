package hostpath

import (
	"context"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

func ctrlPublish(d *Driver, id, node string, vc *csi.VolumeCapability, readonly bool) (*csi.ControllerPublishVolumeResponse, error) {
	return d.ControllerPublishVolume(context.Background(), &csi.ControllerPublishVolumeRequest{
		VolumeId: id, NodeId: node, VolumeCapability: vc, Readonly: readonly,
	})
}

func TestControllerPublish(t *testing.T) {
	ctx := context.Background()
	// Two drivers on one BasePath, as two nodes sharing storage: each
	// publishes to its own node and sees the other's attachments.
	d := newTestDriver(t, Options{ControllerPublish: true, MaxVolumesPerNode: 2})
	const node2 = "node-2"
	d2 := newTestDriver(t, Options{NodeID: node2, BasePath: d.opts.BasePath, ControllerPublish: true, MaxVolumesPerNode: 2})
	// A driver on shared storage cannot know the cluster's nodes.
	shared := newTestDriver(t, Options{NodeID: "node-3", BasePath: d.opts.BasePath, ControllerPublish: true, MaxVolumesPerNode: 2, Shared: true})
	a := mustCreate(t, d, createReq("a", 0))
	b := mustCreate(t, d, createReq("b", 0))
	c := mustCreate(t, d, createReq("c", 0))
	e := mustCreate(t, d, createReq("e", 0))
	ro := testkit.MountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY)

	tests := []struct {
		name string
		d    *Driver
		id   string
		node string
		vc   *csi.VolumeCapability
		ro   bool
		code codes.Code
		want map[string]string
		msg  string
	}{
		{"publish a to node-1", d, a, testNode, rwo, false, codes.OK, map[string]string{"attachedTo": testNode}, ""},
		{"again", d, a, testNode, rwo, false, codes.OK, map[string]string{"attachedTo": testNode}, ""},
		{"readonly differs", d, a, testNode, rwo, true, codes.AlreadyExists, nil, "readonly=false"},
		{"access mode differs", d, a, testNode, ro, false, codes.AlreadyExists, nil, "SINGLE_NODE_WRITER"},
		{"to a second node", d2, a, node2, rwo, false, codes.FailedPrecondition, nil, `published to node "node-1"`},
		{"b readonly to node-1", d, b, testNode, rwo, true, codes.OK, map[string]string{"attachedTo": testNode, "readonly": "true"}, ""},
		{"c over the limit of node-1", d, c, testNode, rwo, false, codes.ResourceExhausted, nil, `node "node-1" already has 2`},
		{"c to node-2", d2, c, node2, rwo, false, codes.OK, map[string]string{"attachedTo": node2}, ""},
		{"unknown node", d, b, "n1", rwo, false, codes.NotFound, nil, `node "n1" not found`},
		{"any node on shared storage", shared, e, "n1", rwo, false, codes.OK, map[string]string{"attachedTo": "n1"}, ""},
		{"a node only another driver knows", d, c, node2, rwo, false, codes.NotFound, nil, `node "node-2" not found`},
		{"unknown node, volume already published there", d2, b, testNode, rwo, true, codes.NotFound, nil, `node "node-1" not found`},
		{"unknown volume", d, volumeIDFor("nope"), testNode, rwo, false, codes.NotFound, nil, "not found"},
		{"foreign volume id", d, "../../etc", testNode, rwo, false, codes.NotFound, nil, "not a local-hostpath volume id"},
		{"no volume id", d, "", testNode, rwo, false, codes.InvalidArgument, nil, "volume_id"},
		{"no node id", d, a, "", rwo, false, codes.InvalidArgument, nil, "node_id"},
		{"no capability", d, a, testNode, nil, false, codes.InvalidArgument, nil, "volume_capability"},
		{"block", d, a, testNode, blockCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), false, codes.InvalidArgument, nil, "block"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := ctrlPublish(tc.d, tc.id, tc.node, tc.vc, tc.ro)
			if tc.code != codes.OK {
				testkit.WantCode(t, err, tc.code, tc.msg)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(&csi.ControllerPublishVolumeResponse{PublishContext: tc.want}, resp, protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}

	// Published nodes show up in ListVolumes and ControllerGetVolume.
	list, err := d.ListVolumes(ctx, &csi.ListVolumesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	published := map[string][]string{}
	for _, e := range list.Entries {
		if e.Status == nil {
			t.Errorf("entry %s has no status (required with LIST_VOLUMES_PUBLISHED_NODES)", e.Volume.VolumeId)
		}
		published[e.Volume.VolumeId] = e.GetStatus().GetPublishedNodeIds()
	}
	if diff := cmp.Diff(map[string][]string{a: {testNode}, b: {testNode}, c: {node2}, e: {"n1"}}, published); diff != "" {
		t.Errorf("published nodes (-want +got):\n%s", diff)
	}

	// Attached volumes cannot be deleted; unpublish frees them.
	_, err = d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: a})
	testkit.WantCode(t, err, codes.FailedPrecondition, "still published to node(s) node-1")
	for range 2 {
		if _, err := d.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: a, NodeId: testNode}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ctrlPublish(d2, a, node2, rwo, false); err != nil {
		t.Errorf("publish to node-2 after unpublish from node-1: %v", err)
	}
	// No node id: unpublish from every node.
	if _, err := d.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: a}); err != nil {
		t.Fatal(err)
	}
	got, err := d.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: a})
	if err != nil || len(got.GetStatus().GetPublishedNodeIds()) != 0 {
		t.Errorf("after unpublish all: %v, %v", got, err)
	}
	if _, err := d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: a}); err != nil {
		t.Errorf("DeleteVolume after unpublish: %v", err)
	}
	// Unknown volumes and nodes are already unpublished.
	for _, req := range []*csi.ControllerUnpublishVolumeRequest{
		{VolumeId: volumeIDFor("nope"), NodeId: testNode},
		{VolumeId: "foreign", NodeId: testNode},
		{VolumeId: b, NodeId: "never-seen"},
	} {
		if _, err := d.ControllerUnpublishVolume(ctx, req); err != nil {
			t.Errorf("ControllerUnpublishVolume(%v): %v", req, err)
		}
	}
	_, err = d.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{NodeId: "n1"})
	testkit.WantCode(t, err, codes.InvalidArgument, "volume_id")
}

func TestControllerPublishDisabled(t *testing.T) {
	d := newTestDriver(t, Options{})
	id := mustCreate(t, d, createReq("a", 0))
	_, err := ctrlPublish(d, id, "n1", rwo, false)
	testkit.WantCode(t, err, codes.Unimplemented, "PUBLISH_UNPUBLISH_VOLUME")
	_, err = d.ControllerUnpublishVolume(context.Background(), &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "n1"})
	testkit.WantCode(t, err, codes.Unimplemented, "PUBLISH_UNPUBLISH_VOLUME")
	// Without the capability, list entries carry no status.
	list, err := d.ListVolumes(context.Background(), &csi.ListVolumesRequest{})
	if err != nil || len(list.Entries) != 1 || list.Entries[0].Status != nil {
		t.Errorf("ListVolumes = %v, %v", list, err)
	}
}
