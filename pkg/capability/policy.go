package capability

import (
	"context"
	"fmt"
	"slices"
	"strings"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/config"
	"github.com/democratic-csi/proxy-topology/pkg/upstream"
)

// Policy is proxy.capabilities resolved: a nil list (or nil Expansion) is
// computed from the upstreams; a given one is advertised as it is.
type Policy struct {
	Controller []csi.ControllerServiceCapability_RPC_Type
	Node       []csi.NodeServiceCapability_RPC_Type
	Expansion  *csi.PluginCapability_VolumeExpansion_Type
	// ControllerPublish adds PUBLISH_UNPUBLISH_VOLUME to what the proxy
	// implements (proxy.controllerPublish).
	ControllerPublish bool
}

// NewPolicy resolves proxy.capabilities. Errors name the key path.
func NewPolicy(c config.Capabilities, controllerPublish bool) (Policy, error) {
	p := Policy{ControllerPublish: controllerPublish}
	if len(c.Controller) > 0 || len(c.Node) > 0 {
		explicit, err := Resolve(c.Controller, c.Node, controllerPublish)
		if err != nil {
			return Policy{}, err
		}
		if len(c.Controller) > 0 {
			p.Controller = explicit.Controller
		}
		if len(c.Node) > 0 {
			p.Node = explicit.Node
		}
	}
	var e csi.PluginCapability_VolumeExpansion_Type
	switch c.VolumeExpansion {
	case "":
		return p, nil
	case config.ExpansionOnline:
		e = csi.PluginCapability_VolumeExpansion_ONLINE
	case config.ExpansionOffline:
		e = csi.PluginCapability_VolumeExpansion_OFFLINE
	case config.ExpansionNone:
		e = csi.PluginCapability_VolumeExpansion_UNKNOWN
	default:
		return Policy{}, fmt.Errorf("proxy.capabilities.volumeExpansion: %q is not one of online, offline, none", c.VolumeExpansion)
	}
	p.Expansion = &e
	return p, nil
}

// Auto says whether any part of the policy is computed from upstreams.
func (p Policy) Auto() bool {
	return p.Controller == nil || p.Node == nil || p.Expansion == nil
}

// Upstream is what one upstream advertises.
type Upstream struct {
	Controller []csi.ControllerServiceCapability_RPC_Type
	Node       []csi.NodeServiceCapability_RPC_Type
	Expansion  csi.PluginCapability_VolumeExpansion_Type
	// ControllerService: the plugin capability CONTROLLER_SERVICE, or,
	// from an upstream that does not answer GetPluginCapabilities, a
	// controller service that answers ControllerGetCapabilities.
	ControllerService bool
}

// Aggregate is what the proxy advertises when ups are the capabilities of
// the upstreams that could be asked: the explicit parts of p as they are,
// the others the proxy's implemented set (in its order) filtered by the
// union of ups.
func (p Policy) Aggregate(ups []Upstream) Set {
	ctrl := map[csi.ControllerServiceCapability_RPC_Type]bool{}
	node := map[csi.NodeServiceCapability_RPC_Type]bool{}
	expansion := csi.PluginCapability_VolumeExpansion_UNKNOWN
	service := false
	for _, u := range ups {
		service = service || u.ControllerService
		for _, t := range u.Controller {
			ctrl[t] = true
		}
		for _, t := range u.Node {
			node[t] = true
		}
		switch {
		case u.Expansion == csi.PluginCapability_VolumeExpansion_ONLINE:
			expansion = u.Expansion
		case u.Expansion == csi.PluginCapability_VolumeExpansion_OFFLINE && expansion == csi.PluginCapability_VolumeExpansion_UNKNOWN:
			expansion = u.Expansion
		}
	}
	out := Set{Controller: p.Controller, Node: p.Node, Expansion: expansion, ControllerService: service}
	if p.Controller != nil {
		out.ControllerService = len(p.Controller) > 0
	}
	if p.Controller == nil {
		out.Controller = []csi.ControllerServiceCapability_RPC_Type{}
		for _, t := range Implemented(p.ControllerPublish) {
			if ctrl[t] {
				out.Controller = append(out.Controller, t)
			}
		}
	}
	if p.Node == nil {
		out.Node = []csi.NodeServiceCapability_RPC_Type{}
		for _, t := range supportedNode {
			if node[t] {
				out.Node = append(out.Node, t)
			}
		}
	}
	if p.Expansion != nil {
		out.Expansion = *p.Expansion
	}
	return out
}

// Unconfirmed is a connection whose upstream could not be asked in a
// refresh (or whose file does not load); it contributed nothing.
type Unconfirmed struct {
	Connection string
	Err        error
	// Retry says asking again soon may help: the upstream did not answer
	// (not listening yet, down, hung), or the connections could not be
	// listed. A file that does not load, or a connection refused as a
	// loop, waits for an edit instead (watch.go).
	Retry bool
}

// Ask asks an upstream for its capabilities: controller ones from
// ctrl (nil: not asked), node ones from node (nil: not asked), the plugin's
// expansion from whichever is set. The controller and node answers come
// from the clients' own refresh (upstream.Client.RefreshController,
// RefreshNode), which also updates the cache the per-call checks read, so
// an upstream's capabilities have one source. An upstream that answers
// UNIMPLEMENTED for a service has none of its capabilities (a node-only
// driver); any other error means nothing could be confirmed.
func Ask(ctx context.Context, ctrl, node *upstream.Client) (Upstream, error) {
	var out Upstream
	unimplemented := func(err error) bool { return status.Code(err) == codes.Unimplemented }
	id := ctrl
	if id == nil {
		id = node
	}
	pluginAnswered := false
	if id != nil {
		resp, err := id.Identity.GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
		if err != nil && !unimplemented(err) {
			return Upstream{}, fmt.Errorf("GetPluginCapabilities: %w", err)
		}
		pluginAnswered = err == nil
		for _, c := range resp.GetCapabilities() {
			if e := c.GetVolumeExpansion(); e != nil {
				out.Expansion = e.GetType()
			}
			if c.GetService().GetType() == csi.PluginCapability_Service_CONTROLLER_SERVICE {
				out.ControllerService = ctrl != nil
			}
		}
	}
	if ctrl != nil {
		types, err := ctrl.RefreshController(ctx)
		if err != nil && !unimplemented(err) {
			return Upstream{}, fmt.Errorf("ControllerGetCapabilities: %w", err)
		}
		if err == nil && !pluginAnswered {
			out.ControllerService = true
		}
		out.Controller = types
	}
	if node != nil {
		types, err := node.RefreshNode(ctx)
		if err != nil && !unimplemented(err) {
			return Upstream{}, fmt.Errorf("NodeGetCapabilities: %w", err)
		}
		out.Node = types
	}
	return out, nil
}

func typeNames[T fmt.Stringer](ts []T) string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.String()
	}
	return strings.Join(names, ",")
}

// diff names what next advertises that prev did not, and the reverse.
func diff(prev, next Set) (added, removed []string) {
	diffList := func(a, b []string, prefix string) {
		for _, x := range b {
			if !slices.Contains(a, x) {
				added = append(added, prefix+x)
			}
		}
		for _, x := range a {
			if !slices.Contains(b, x) {
				removed = append(removed, prefix+x)
			}
		}
	}
	names := func(s string) []string {
		if s == "" {
			return nil
		}
		return strings.Split(s, ",")
	}
	diffList(names(typeNames(prev.Controller)), names(typeNames(next.Controller)), "controller:")
	diffList(names(typeNames(prev.Node)), names(typeNames(next.Node)), "node:")
	if prev.ControllerService != next.ControllerService {
		if next.ControllerService {
			added = append(added, "plugin:CONTROLLER_SERVICE")
		} else {
			removed = append(removed, "plugin:CONTROLLER_SERVICE")
		}
	}
	if prev.Expansion != next.Expansion {
		if next.Expansion == csi.PluginCapability_VolumeExpansion_UNKNOWN {
			removed = append(removed, "expansion:"+prev.Expansion.String())
		} else {
			// OFFLINE to ONLINE, or none to either: the resizer may do more.
			added = append(added, "expansion:"+next.Expansion.String())
		}
	}
	return added, removed
}
