package hostpath

import (
	"context"
	"os"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func (d *Driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.opts.DriverName, VendorVersion: d.opts.Version}, nil
}

// GetPluginCapabilities advertises the controller service and online
// expansion (expanding only rewrites a record, so it never needs the volume
// to be unpublished). There is no VOLUME_ACCESSIBILITY_CONSTRAINTS: the
// driver cannot know which nodes see BasePath; the proxy adds topology.
func (d *Driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{
		{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{
			Type: csi.PluginCapability_Service_CONTROLLER_SERVICE,
		}}},
		{Type: &csi.PluginCapability_VolumeExpansion_{VolumeExpansion: &csi.PluginCapability_VolumeExpansion{
			Type: csi.PluginCapability_VolumeExpansion_ONLINE,
		}}},
	}}, nil
}

// Probe is a single stat of BasePath: cheap enough for a liveness probe, and
// it catches the one failure a restart can fix (the host directory or its
// mount disappeared from under the container).
func (d *Driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	if _, err := os.Stat(d.store.volumesDir()); err != nil {
		return nil, failedPrecondition("local-hostpath base path is not usable: %v", err)
	}
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
