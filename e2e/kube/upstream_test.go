package kube

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// fakeUpstream is a CSI controller that a `driver: csi` connection
// forwards to, with what a test needs to set and see: the capacity that
// GetCapacity reports (set at any time; the proxy forwards it for every
// topology the connection serves, so it is what the external-provisioner
// publishes there), the volumes it made, and the ControllerPublish calls
// with the publish_context it answers. It is a real gRPC server on a unix
// socket in a temporary directory, stopped when the test ends.
type fakeUpstream struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer

	// Endpoint is the connection's csi.endpoint (unix://...).
	Endpoint string
	publish  bool

	mu        sync.Mutex
	capacity  int64
	volumes   map[string]int64 // volume id -> bytes
	creates   int
	published map[string]string // volume id -> node id, while published
}

// startFakeUpstream serves a fake upstream reporting capacity bytes; with
// publish it advertises PUBLISH_UNPUBLISH_VOLUME and answers each
// ControllerPublishVolume with the publish_context of publishContext.
func startFakeUpstream(t *testing.T, capacity int64, publish bool) *fakeUpstream {
	t.Helper()
	// Unix socket paths are limited to 108 bytes; t.TempDir is too long.
	dir, err := os.MkdirTemp("", "ptup-")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "csi.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeUpstream{Endpoint: "unix://" + sock, publish: publish, capacity: capacity,
		volumes: map[string]int64{}, published: map[string]string{}}
	srv := grpc.NewServer()
	csi.RegisterIdentityServer(srv, f)
	csi.RegisterControllerServer(srv, f)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Stop(); os.RemoveAll(dir) })
	return f
}

// SetCapacity changes what GetCapacity reports from now on.
func (f *fakeUpstream) SetCapacity(bytes int64) {
	f.mu.Lock()
	f.capacity = bytes
	f.mu.Unlock()
}

// Creates is the number of volumes CreateVolume made.
func (f *fakeUpstream) Creates() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.creates
}

// Volumes is the number of volumes that exist (made and not deleted).
func (f *fakeUpstream) Volumes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.volumes)
}

// PublishedTo returns the node id a volume (upstream id) is published to.
func (f *fakeUpstream) PublishedTo(id string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.published[id]
	return n, ok
}

// publishContext is what the fake answers ControllerPublishVolume with.
func publishContext(volumeID, nodeID string) map[string]string {
	return map[string]string{"devicePath": "/dev/fake/" + volumeID, "attachedTo": nodeID}
}

// connectionText is a connection file that forwards to the fake and serves
// the given zones (none: everywhere).
func (f *fakeUpstream) connectionText(zones ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "driver: csi\ncsi:\n  endpoint: %s\n", f.Endpoint)
	if len(zones) > 0 {
		b.WriteString("proxy:\n  perDriver:\n    topology:\n")
		for _, z := range zones {
			fmt.Fprintf(&b, "    - requirements: {zone: %s}\n", z)
		}
	}
	return b.String()
}

func (f *fakeUpstream) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: "fake.upstream.e2e", VendorVersion: "0.0.1"}, nil
}

func (f *fakeUpstream) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{
		Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}},
	}}}, nil
}

func (f *fakeUpstream) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

func (f *fakeUpstream) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	caps := []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY,
	}
	if f.publish {
		caps = append(caps, csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME)
	}
	resp := &csi.ControllerGetCapabilitiesResponse{}
	for _, c := range caps {
		resp.Capabilities = append(resp.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: c}},
		})
	}
	return resp, nil
}

func (f *fakeUpstream) GetCapacity(context.Context, *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &csi.GetCapacityResponse{AvailableCapacity: f.capacity}, nil
}

// CreateVolume is idempotent by name: the volume id is the name.
func (f *fakeUpstream) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	size := req.GetCapacityRange().GetRequiredBytes()
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.volumes[req.GetName()]; !ok {
		if size > f.capacity {
			return nil, status.Errorf(codes.OutOfRange, "%d bytes requested, %d available", size, f.capacity)
		}
		f.volumes[req.GetName()] = size
		f.creates++
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: req.GetName(), CapacityBytes: size}}, nil
}

func (f *fakeUpstream) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	f.mu.Lock()
	delete(f.volumes, req.GetVolumeId())
	f.mu.Unlock()
	return &csi.DeleteVolumeResponse{}, nil
}

func (f *fakeUpstream) ControllerPublishVolume(_ context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.volumes[req.GetVolumeId()]; !ok {
		return nil, status.Errorf(codes.NotFound, "volume %s", req.GetVolumeId())
	}
	if n, ok := f.published[req.GetVolumeId()]; ok && n != req.GetNodeId() {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is published to %s", req.GetVolumeId(), n)
	}
	f.published[req.GetVolumeId()] = req.GetNodeId()
	return &csi.ControllerPublishVolumeResponse{PublishContext: publishContext(req.GetVolumeId(), req.GetNodeId())}, nil
}

func (f *fakeUpstream) ControllerUnpublishVolume(_ context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	f.mu.Lock()
	delete(f.published, req.GetVolumeId())
	f.mu.Unlock()
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}
