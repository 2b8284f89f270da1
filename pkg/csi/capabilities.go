package csi

import (
	"context"
	"slices"

	csi "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/democratic-csi/proxy-topology/pkg/capability"
)

// advertises reports whether the proxy advertises a controller capability.
func (d *Driver) advertises(t csi.ControllerServiceCapability_RPC_Type) bool {
	return slices.Contains(d.Capabilities().Controller, t)
}

// Capabilities returns what the driver advertises now.
func (d *Driver) Capabilities() capability.Set { return d.caps.Current() }

// ControllerGetCapabilities advertises what the proxy routes (with a
// Policy: what its upstreams can do, see capability.Watcher).
func (d *Driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	resp := &csi.ControllerGetCapabilitiesResponse{}
	for _, t := range d.Capabilities().Controller {
		resp.Capabilities = append(resp.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return resp, nil
}

// NodeGetCapabilities advertises staging for every connection; for
// upstreams that do not stage, the proxy emulates it (stage and unstage do
// nothing, publish goes without a staging path).
func (d *Driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	resp := &csi.NodeGetCapabilitiesResponse{}
	for _, t := range d.Capabilities().Node {
		resp.Capabilities = append(resp.Capabilities, &csi.NodeServiceCapability{
			Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}})
	}
	return resp, nil
}
