// Package typedproxy is a CSI forwarder with no logic that reads every
// message the way proxy-topology does: gRPC decodes each request into the
// generated CSI type, the handler calls the same method on a client of the
// upstream (which encodes it again), and the answer is decoded and encoded
// once more on the way back. It is the floor of any CSI proxy that has to
// look inside requests: decode, forward, encode, and nothing else.
//
// bench/rawproxy is the lower floor of a proxy that never decodes at all.
package typedproxy

import (
	"context"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Forwarder implements the Identity, Controller and Node services by
// calling the same method upstream. The embedded Unimplemented servers are
// only there because the generated interfaces require them; every method
// of the three services is forwarded (TestForwardsEveryMethod).
type Forwarder struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	identity   csi.IdentityClient
	controller csi.ControllerClient
	node       csi.NodeClient
}

// NewForwarder forwards to cc.
func NewForwarder(cc grpc.ClientConnInterface) *Forwarder {
	return &Forwarder{
		identity:   csi.NewIdentityClient(cc),
		controller: csi.NewControllerClient(cc),
		node:       csi.NewNodeClient(cc),
	}
}

// Register adds the three services to s.
func (f *Forwarder) Register(s grpc.ServiceRegistrar) {
	csi.RegisterIdentityServer(s, f)
	csi.RegisterControllerServer(s, f)
	csi.RegisterNodeServer(s, f)
}

// New returns a server forwarding every CSI call to upstream (a gRPC target
// such as unix:///path) and the client connection it uses; the caller
// closes both. Both use gRPC's default options, as the raw forwarder does;
// opts are added to the server's.
func New(upstream string, opts ...grpc.ServerOption) (*grpc.Server, *grpc.ClientConn, error) {
	cc, err := grpc.NewClient(upstream, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	srv := grpc.NewServer(opts...)
	NewForwarder(cc).Register(srv)
	return srv, cc, nil
}

// Identity.

func (f *Forwarder) GetPluginInfo(ctx context.Context, req *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return f.identity.GetPluginInfo(ctx, req)
}

func (f *Forwarder) GetPluginCapabilities(ctx context.Context, req *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return f.identity.GetPluginCapabilities(ctx, req)
}

func (f *Forwarder) Probe(ctx context.Context, req *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return f.identity.Probe(ctx, req)
}

// Controller.

func (f *Forwarder) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	return f.controller.CreateVolume(ctx, req)
}

func (f *Forwarder) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	return f.controller.DeleteVolume(ctx, req)
}

func (f *Forwarder) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	return f.controller.ControllerPublishVolume(ctx, req)
}

func (f *Forwarder) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	return f.controller.ControllerUnpublishVolume(ctx, req)
}

func (f *Forwarder) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	return f.controller.ValidateVolumeCapabilities(ctx, req)
}

func (f *Forwarder) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	return f.controller.ListVolumes(ctx, req)
}

func (f *Forwarder) ControllerListVolumeHealth(ctx context.Context, req *csi.ControllerListVolumeHealthRequest) (*csi.ControllerListVolumeHealthResponse, error) {
	return f.controller.ControllerListVolumeHealth(ctx, req)
}

func (f *Forwarder) ControllerGetVolumeHealth(ctx context.Context, req *csi.ControllerGetVolumeHealthRequest) (*csi.ControllerGetVolumeHealthResponse, error) {
	return f.controller.ControllerGetVolumeHealth(ctx, req)
}

func (f *Forwarder) GetCapacity(ctx context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	return f.controller.GetCapacity(ctx, req)
}

func (f *Forwarder) ControllerGetCapabilities(ctx context.Context, req *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	return f.controller.ControllerGetCapabilities(ctx, req)
}

func (f *Forwarder) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	return f.controller.CreateSnapshot(ctx, req)
}

func (f *Forwarder) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	return f.controller.DeleteSnapshot(ctx, req)
}

func (f *Forwarder) ListSnapshots(ctx context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	return f.controller.ListSnapshots(ctx, req)
}

func (f *Forwarder) GetSnapshot(ctx context.Context, req *csi.GetSnapshotRequest) (*csi.GetSnapshotResponse, error) {
	return f.controller.GetSnapshot(ctx, req)
}

func (f *Forwarder) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	return f.controller.ControllerExpandVolume(ctx, req)
}

func (f *Forwarder) ControllerGetVolume(ctx context.Context, req *csi.ControllerGetVolumeRequest) (*csi.ControllerGetVolumeResponse, error) {
	return f.controller.ControllerGetVolume(ctx, req)
}

func (f *Forwarder) ControllerModifyVolume(ctx context.Context, req *csi.ControllerModifyVolumeRequest) (*csi.ControllerModifyVolumeResponse, error) {
	return f.controller.ControllerModifyVolume(ctx, req)
}

// Node.

func (f *Forwarder) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	return f.node.NodeStageVolume(ctx, req)
}

func (f *Forwarder) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	return f.node.NodeUnstageVolume(ctx, req)
}

func (f *Forwarder) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	return f.node.NodePublishVolume(ctx, req)
}

func (f *Forwarder) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	return f.node.NodeUnpublishVolume(ctx, req)
}

func (f *Forwarder) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	return f.node.NodeGetVolumeStats(ctx, req)
}

func (f *Forwarder) NodeGetVolumeHealth(ctx context.Context, req *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	return f.node.NodeGetVolumeHealth(ctx, req)
}

func (f *Forwarder) NodeGetStorageHealth(ctx context.Context, req *csi.NodeGetStorageHealthRequest) (*csi.NodeGetStorageHealthResponse, error) {
	return f.node.NodeGetStorageHealth(ctx, req)
}

func (f *Forwarder) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	return f.node.NodeExpandVolume(ctx, req)
}

func (f *Forwarder) NodeGetCapabilities(ctx context.Context, req *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return f.node.NodeGetCapabilities(ctx, req)
}

func (f *Forwarder) NodeGetInfo(ctx context.Context, req *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return f.node.NodeGetInfo(ctx, req)
}
