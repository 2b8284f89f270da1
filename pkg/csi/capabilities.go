package csi

import (
	"context"
	"errors"
	"fmt"
	"slices"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
)

// supportedController is everything the proxy can route, in the order it is
// advertised. PUBLISH_UNPUBLISH_VOLUME is added only when controller
// publishing is enabled.
var supportedController = []csi.ControllerServiceCapability_RPC_Type{
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
	csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
	csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
	csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
	csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
	csi.ControllerServiceCapability_RPC_GET_CAPACITY,
	csi.ControllerServiceCapability_RPC_GET_VOLUME,
	csi.ControllerServiceCapability_RPC_MODIFY_VOLUME,
	csi.ControllerServiceCapability_RPC_GET_SNAPSHOT,
	csi.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH,
	csi.ControllerServiceCapability_RPC_LIST_VOLUME_HEALTH,
	csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
}

var supportedNode = []csi.NodeServiceCapability_RPC_Type{
	csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
	csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
	csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
	csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
	csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
}

// Capabilities are what the proxy advertises.
type Capabilities struct {
	Controller []csi.ControllerServiceCapability_RPC_Type
	Node       []csi.NodeServiceCapability_RPC_Type
	// Expansion is the VOLUME_EXPANSION plugin capability; UNKNOWN
	// advertises none.
	Expansion csi.PluginCapability_VolumeExpansion_Type
	// ControllerService advertises the CONTROLLER_SERVICE plugin
	// capability: without it the CO calls no controller RPC (a node-only
	// upstream).
	ControllerService bool
}

// ResolveCapabilities turns explicit capability lists into the advertised
// sets: empty lists mean everything supported (and online expansion);
// names must be supported ones. Errors name the key path. proxy-topology
// serve uses a Policy instead, where an empty list means auto.
func ResolveCapabilities(controller, node []string, controllerPublish bool) (Capabilities, error) {
	ctrl := implementedController(controllerPublish)
	var errs []error
	out := Capabilities{Controller: ctrl, Node: supportedNode, Expansion: csi.PluginCapability_VolumeExpansion_ONLINE, ControllerService: true}
	if len(controller) > 0 {
		out.Controller = nil
		for i, name := range controller {
			v, ok := csi.ControllerServiceCapability_RPC_Type_value[name]
			t := csi.ControllerServiceCapability_RPC_Type(v)
			if !ok || !containsType(ctrl, t) {
				errs = append(errs, fmt.Errorf("proxy.capabilities.controller[%d]: %q is not a controller capability the proxy supports%s", i, name, publishHint(name, controllerPublish)))
				continue
			}
			out.Controller = append(out.Controller, t)
		}
	}
	if len(node) > 0 {
		out.Node = nil
		for i, name := range node {
			v, ok := csi.NodeServiceCapability_RPC_Type_value[name]
			t := csi.NodeServiceCapability_RPC_Type(v)
			if !ok || !containsType(supportedNode, t) {
				errs = append(errs, fmt.Errorf("proxy.capabilities.node[%d]: %q is not a node capability the proxy supports", i, name))
				continue
			}
			out.Node = append(out.Node, t)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Capabilities{}, err
	}
	return out, nil
}

// publishCapabilities are added when controller publishing is on. The
// proxy forwards ControllerPublishVolume's readonly flag unchanged, so an
// upstream that honours it (PUBLISH_READONLY) still does through the
// proxy; without PUBLISH_READONLY the CO would not ask for a read-only
// attachment (csi-sanity skips its incompatible-publish spec).
var publishCapabilities = []csi.ControllerServiceCapability_RPC_Type{
	csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
	csi.ControllerServiceCapability_RPC_PUBLISH_READONLY,
}

// implementedController is what the proxy can route: supportedController,
// with publishCapabilities first when controller publishing is on.
func implementedController(controllerPublish bool) []csi.ControllerServiceCapability_RPC_Type {
	if !controllerPublish {
		return supportedController
	}
	return append(slices.Clip(publishCapabilities), supportedController...)
}

func publishHint(name string, enabled bool) string {
	if (name == "PUBLISH_UNPUBLISH_VOLUME" || name == "PUBLISH_READONLY") && !enabled {
		return " (set proxy.controllerPublish: true)"
	}
	return ""
}

func containsType[T comparable](list []T, t T) bool {
	for _, x := range list {
		if x == t {
			return true
		}
	}
	return false
}

// advertises reports whether the proxy advertises a controller capability.
func (d *Driver) advertises(t csi.ControllerServiceCapability_RPC_Type) bool {
	return containsType(d.Capabilities().Controller, t)
}

// Capabilities returns what the driver advertises now.
func (d *Driver) Capabilities() Capabilities { return *d.caps.Load() }

// ControllerGetCapabilities advertises what the proxy routes (with a
// Policy: what its upstreams can do, see RefreshCapabilities).
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
