package csi

import (
	"context"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// GetPluginInfo reports the configured driver name and version, and, with
// a loop guard (Connections.Guard), its loop markers in the manifest (pkg/backend/selfroute.go).
func (d *Driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	resp := &csi.GetPluginInfoResponse{Name: d.opts.Name, VendorVersion: d.opts.Version}
	if g := d.opts.Connections.Guard(); g != nil {
		resp.Manifest = g.Manifest()
	}
	return resp, nil
}

// GetPluginCapabilities advertises topology, which is the proxy's own, and
// the controller service and volume expansion as Capabilities says (with a
// Policy: the controller service if some upstream has one; online
// expansion if some upstream expands online, else offline if some
// upstream expands offline, else none).
func (d *Driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	svc := func(t csi.PluginCapability_Service_Type) *csi.PluginCapability {
		return &csi.PluginCapability{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: t}}}
	}
	caps := d.Capabilities()
	resp := &csi.GetPluginCapabilitiesResponse{}
	if caps.ControllerService {
		resp.Capabilities = append(resp.Capabilities, svc(csi.PluginCapability_Service_CONTROLLER_SERVICE))
	}
	resp.Capabilities = append(resp.Capabilities, svc(csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS))
	if e := caps.Expansion; e != csi.PluginCapability_VolumeExpansion_UNKNOWN {
		resp.Capabilities = append(resp.Capabilities, &csi.PluginCapability{Type: &csi.PluginCapability_VolumeExpansion_{
			VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: e}}})
	}
	return resp, nil
}

// Probe answers from memory only: a liveness probe must not depend on any
// upstream, or one dead storage system would restart the whole proxy.
func (d *Driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(d.ready.Load())}, nil
}
