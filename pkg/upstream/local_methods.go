package upstream

// The methods below the line implement the CSI Identity, Controller and
// Node client interfaces (csi_grpc.pb.go) over the in-process driver: one
// method each, all through invokeLocal. They are written by hand, one line
// each, and no tool regenerates them: when the CSI module adds an RPC, the
// assertions below stop compiling until its method is added here.

import (
	"context"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
)

var (
	_ csi.IdentityClient   = localIdentity{}
	_ csi.ControllerClient = localController{}
	_ csi.NodeClient       = localNode{}
)

// ---

func (l localIdentity) GetPluginInfo(ctx context.Context, in *csi.GetPluginInfoRequest, _ ...grpc.CallOption) (*csi.GetPluginInfoResponse, error) {
	return invokeLocal(l.c, ctx, csi.Identity_GetPluginInfo_FullMethodName, in, l.d.GetPluginInfo)
}

func (l localIdentity) GetPluginCapabilities(ctx context.Context, in *csi.GetPluginCapabilitiesRequest, _ ...grpc.CallOption) (*csi.GetPluginCapabilitiesResponse, error) {
	return invokeLocal(l.c, ctx, csi.Identity_GetPluginCapabilities_FullMethodName, in, l.d.GetPluginCapabilities)
}

func (l localIdentity) Probe(ctx context.Context, in *csi.ProbeRequest, _ ...grpc.CallOption) (*csi.ProbeResponse, error) {
	return invokeLocal(l.c, ctx, csi.Identity_Probe_FullMethodName, in, l.d.Probe)
}

func (l localController) CreateVolume(ctx context.Context, in *csi.CreateVolumeRequest, _ ...grpc.CallOption) (*csi.CreateVolumeResponse, error) {
	return invokeLocal(l.c, ctx, csi.Controller_CreateVolume_FullMethodName, in, l.d.CreateVolume)
}

func (l localController) DeleteVolume(ctx context.Context, in *csi.DeleteVolumeRequest, _ ...grpc.CallOption) (*csi.DeleteVolumeResponse, error) {
	return invokeLocal(l.c, ctx, csi.Controller_DeleteVolume_FullMethodName, in, l.d.DeleteVolume)
}

func (l localController) ControllerPublishVolume(ctx context.Context, in *csi.ControllerPublishVolumeRequest, _ ...grpc.CallOption) (*csi.ControllerPublishVolumeResponse, error) {
	return invokeLocal(l.c, ctx, csi.Controller_ControllerPublishVolume_FullMethodName, in, l.d.ControllerPublishVolume)
}

func (l localController) ControllerUnpublishVolume(ctx context.Context, in *csi.ControllerUnpublishVolumeRequest, _ ...grpc.CallOption) (*csi.ControllerUnpublishVolumeResponse, error) {
	return invokeLocal(l.c, ctx, csi.Controller_ControllerUnpublishVolume_FullMethodName, in, l.d.ControllerUnpublishVolume)
}

func (l localController) ValidateVolumeCapabilities(ctx context.Context, in *csi.ValidateVolumeCapabilitiesRequest, _ ...grpc.CallOption) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	return invokeLocal(l.c, ctx, csi.Controller_ValidateVolumeCapabilities_FullMethodName, in, l.d.ValidateVolumeCapabilities)
}

func (l localController) ListVolumes(ctx context.Context, in *csi.ListVolumesRequest, _ ...grpc.CallOption) (*csi.ListVolumesResponse, error) {
	return invokeLocal(l.c, ctx, csi.Controller_ListVolumes_FullMethodName, in, l.d.ListVolumes)
}

func (l localController) ControllerListVolumeHealth(ctx context.Context, in *csi.ControllerListVolumeHealthRequest, _ ...grpc.CallOption) (*csi.ControllerListVolumeHealthResponse, error) {
	return invokeLocal(l.c, ctx, csi.Controller_ControllerListVolumeHealth_FullMethodName, in, l.d.ControllerListVolumeHealth)
}

func (l localController) ControllerGetVolumeHealth(ctx context.Context, in *csi.ControllerGetVolumeHealthRequest, _ ...grpc.CallOption) (*csi.ControllerGetVolumeHealthResponse, error) {
	return invokeLocal(l.c, ctx, csi.Controller_ControllerGetVolumeHealth_FullMethodName, in, l.d.ControllerGetVolumeHealth)
}

func (l localController) GetCapacity(ctx context.Context, in *csi.GetCapacityRequest, _ ...grpc.CallOption) (*csi.GetCapacityResponse, error) {
	return invokeLocal(l.c, ctx, csi.Controller_GetCapacity_FullMethodName, in, l.d.GetCapacity)
}

func (l localController) ControllerGetCapabilities(ctx context.Context, in *csi.ControllerGetCapabilitiesRequest, _ ...grpc.CallOption) (*csi.ControllerGetCapabilitiesResponse, error) {
	return invokeLocal(l.c, ctx, csi.Controller_ControllerGetCapabilities_FullMethodName, in, l.d.ControllerGetCapabilities)
}

func (l localController) CreateSnapshot(ctx context.Context, in *csi.CreateSnapshotRequest, _ ...grpc.CallOption) (*csi.CreateSnapshotResponse, error) {
	return invokeLocal(l.c, ctx, csi.Controller_CreateSnapshot_FullMethodName, in, l.d.CreateSnapshot)
}

func (l localController) DeleteSnapshot(ctx context.Context, in *csi.DeleteSnapshotRequest, _ ...grpc.CallOption) (*csi.DeleteSnapshotResponse, error) {
	return invokeLocal(l.c, ctx, csi.Controller_DeleteSnapshot_FullMethodName, in, l.d.DeleteSnapshot)
}

func (l localController) ListSnapshots(ctx context.Context, in *csi.ListSnapshotsRequest, _ ...grpc.CallOption) (*csi.ListSnapshotsResponse, error) {
	return invokeLocal(l.c, ctx, csi.Controller_ListSnapshots_FullMethodName, in, l.d.ListSnapshots)
}

func (l localController) GetSnapshot(ctx context.Context, in *csi.GetSnapshotRequest, _ ...grpc.CallOption) (*csi.GetSnapshotResponse, error) {
	return invokeLocal(l.c, ctx, csi.Controller_GetSnapshot_FullMethodName, in, l.d.GetSnapshot)
}

func (l localController) ControllerExpandVolume(ctx context.Context, in *csi.ControllerExpandVolumeRequest, _ ...grpc.CallOption) (*csi.ControllerExpandVolumeResponse, error) {
	return invokeLocal(l.c, ctx, csi.Controller_ControllerExpandVolume_FullMethodName, in, l.d.ControllerExpandVolume)
}

func (l localController) ControllerGetVolume(ctx context.Context, in *csi.ControllerGetVolumeRequest, _ ...grpc.CallOption) (*csi.ControllerGetVolumeResponse, error) {
	return invokeLocal(l.c, ctx, csi.Controller_ControllerGetVolume_FullMethodName, in, l.d.ControllerGetVolume)
}

func (l localController) ControllerModifyVolume(ctx context.Context, in *csi.ControllerModifyVolumeRequest, _ ...grpc.CallOption) (*csi.ControllerModifyVolumeResponse, error) {
	return invokeLocal(l.c, ctx, csi.Controller_ControllerModifyVolume_FullMethodName, in, l.d.ControllerModifyVolume)
}

func (l localNode) NodeStageVolume(ctx context.Context, in *csi.NodeStageVolumeRequest, _ ...grpc.CallOption) (*csi.NodeStageVolumeResponse, error) {
	return invokeLocal(l.c, ctx, csi.Node_NodeStageVolume_FullMethodName, in, l.d.NodeStageVolume)
}

func (l localNode) NodeUnstageVolume(ctx context.Context, in *csi.NodeUnstageVolumeRequest, _ ...grpc.CallOption) (*csi.NodeUnstageVolumeResponse, error) {
	return invokeLocal(l.c, ctx, csi.Node_NodeUnstageVolume_FullMethodName, in, l.d.NodeUnstageVolume)
}

func (l localNode) NodePublishVolume(ctx context.Context, in *csi.NodePublishVolumeRequest, _ ...grpc.CallOption) (*csi.NodePublishVolumeResponse, error) {
	return invokeLocal(l.c, ctx, csi.Node_NodePublishVolume_FullMethodName, in, l.d.NodePublishVolume)
}

func (l localNode) NodeUnpublishVolume(ctx context.Context, in *csi.NodeUnpublishVolumeRequest, _ ...grpc.CallOption) (*csi.NodeUnpublishVolumeResponse, error) {
	return invokeLocal(l.c, ctx, csi.Node_NodeUnpublishVolume_FullMethodName, in, l.d.NodeUnpublishVolume)
}

func (l localNode) NodeGetVolumeStats(ctx context.Context, in *csi.NodeGetVolumeStatsRequest, _ ...grpc.CallOption) (*csi.NodeGetVolumeStatsResponse, error) {
	return invokeLocal(l.c, ctx, csi.Node_NodeGetVolumeStats_FullMethodName, in, l.d.NodeGetVolumeStats)
}

func (l localNode) NodeGetVolumeHealth(ctx context.Context, in *csi.NodeGetVolumeHealthRequest, _ ...grpc.CallOption) (*csi.NodeGetVolumeHealthResponse, error) {
	return invokeLocal(l.c, ctx, csi.Node_NodeGetVolumeHealth_FullMethodName, in, l.d.NodeGetVolumeHealth)
}

func (l localNode) NodeGetStorageHealth(ctx context.Context, in *csi.NodeGetStorageHealthRequest, _ ...grpc.CallOption) (*csi.NodeGetStorageHealthResponse, error) {
	return invokeLocal(l.c, ctx, csi.Node_NodeGetStorageHealth_FullMethodName, in, l.d.NodeGetStorageHealth)
}

func (l localNode) NodeExpandVolume(ctx context.Context, in *csi.NodeExpandVolumeRequest, _ ...grpc.CallOption) (*csi.NodeExpandVolumeResponse, error) {
	return invokeLocal(l.c, ctx, csi.Node_NodeExpandVolume_FullMethodName, in, l.d.NodeExpandVolume)
}

func (l localNode) NodeGetCapabilities(ctx context.Context, in *csi.NodeGetCapabilitiesRequest, _ ...grpc.CallOption) (*csi.NodeGetCapabilitiesResponse, error) {
	return invokeLocal(l.c, ctx, csi.Node_NodeGetCapabilities_FullMethodName, in, l.d.NodeGetCapabilities)
}

func (l localNode) NodeGetInfo(ctx context.Context, in *csi.NodeGetInfoRequest, _ ...grpc.CallOption) (*csi.NodeGetInfoResponse, error) {
	return invokeLocal(l.c, ctx, csi.Node_NodeGetInfo_FullMethodName, in, l.d.NodeGetInfo)
}
