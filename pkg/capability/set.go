// Package capability decides what the proxy advertises to the CO: the
// set (Set), proxy.capabilities resolved (Policy), the upstreams' answers
// aggregated (Policy.Aggregate), the watcher that refreshes the set from
// the connections (Watcher) and the tracker of the CSI socket's client
// connections that makes the sidecars restart when the set grows
// (Tracker). pkg/csi serves the set; nothing here serves a CSI call.
package capability

import (
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

// Set is what the proxy advertises.
type Set struct {
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

// Resolve turns explicit capability lists into the advertised
// sets: empty lists mean everything supported (and online expansion);
// names must be supported ones. Errors name the key path. proxy-topology
// serve uses a Policy instead, where an empty list means auto.
func Resolve(controller, node []string, controllerPublish bool) (Set, error) {
	ctrl := Implemented(controllerPublish)
	var errs []error
	out := Set{Controller: ctrl, Node: supportedNode, Expansion: csi.PluginCapability_VolumeExpansion_ONLINE, ControllerService: true}
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
		return Set{}, err
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

// Implemented is the controller capabilities the proxy can route: supportedController,
// with publishCapabilities first when controller publishing is on.
func Implemented(controllerPublish bool) []csi.ControllerServiceCapability_RPC_Type {
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
