package csi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/backend"
	"github.com/democratic-csi/proxy-topology/pkg/config"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
	"github.com/democratic-csi/proxy-topology/pkg/upstream"
)

// Kubernetes sidecars read capabilities once at start-up and act on them
// for every volume, so advertising what no upstream can do turns into a
// stream of failed calls (SPEC §6). proxy.capabilities: auto advertises,
// per service, what the proxy implements intersected with the union of
// what the connections' upstreams advertise. It never advertises what it
// could not confirm: an upstream that cannot be asked contributes nothing
// until a later refresh reaches it (retried soon, capswatch.go; what grows
// then makes the sidecars restart), CONTROLLER_SERVICE is advertised
// only when some upstream has a controller service, and with no
// connection at all only VOLUME_ACCESSIBILITY_CONSTRAINTS (the proxy's
// own) is advertised.

// defaultCapabilityTimeout bounds the calls to one upstream in a refresh.
const defaultCapabilityTimeout = 5 * time.Second

// refreshWorkers is how many upstreams a refresh asks at once, so one that
// hangs costs its timeout once, not once per connection after it.
const refreshWorkers = 8

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
		explicit, err := ResolveCapabilities(c.Controller, c.Node, controllerPublish)
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

// UpstreamCaps is what one upstream advertises.
type UpstreamCaps struct {
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
func (p Policy) Aggregate(ups []UpstreamCaps) Capabilities {
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
	out := Capabilities{Controller: p.Controller, Node: p.Node, Expansion: expansion, ControllerService: service}
	if p.Controller != nil {
		out.ControllerService = len(p.Controller) > 0
	}
	if p.Controller == nil {
		out.Controller = []csi.ControllerServiceCapability_RPC_Type{}
		for _, t := range implementedController(p.ControllerPublish) {
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
	// loop, waits for an edit instead (capswatch.go).
	Retry bool
}

// AskClients asks an upstream for its capabilities: controller ones from
// ctrl (nil: not asked), node ones from node (nil: not asked), the plugin's
// expansion from whichever is set. The controller and node answers come
// from the clients' own refresh (upstream.Client.RefreshController,
// RefreshNode), which also updates the cache the per-call checks read, so
// an upstream's capabilities have one source. An upstream that answers
// UNIMPLEMENTED for a service has none of its capabilities (a node-only
// driver); any other error means nothing could be confirmed.
func AskClients(ctx context.Context, ctrl, node *upstream.Client) (UpstreamCaps, error) {
	var out UpstreamCaps
	unimplemented := func(err error) bool { return status.Code(err) == codes.Unimplemented }
	id := ctrl
	if id == nil {
		id = node
	}
	pluginAnswered := false
	if id != nil {
		resp, err := id.Identity.GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
		if err != nil && !unimplemented(err) {
			return UpstreamCaps{}, fmt.Errorf("GetPluginCapabilities: %w", err)
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
			return UpstreamCaps{}, fmt.Errorf("ControllerGetCapabilities: %w", err)
		}
		if err == nil && !pluginAnswered {
			out.ControllerService = true
		}
		out.Controller = types
	}
	if node != nil {
		types, err := node.RefreshNode(ctx)
		if err != nil && !unimplemented(err) {
			return UpstreamCaps{}, fmt.Errorf("NodeGetCapabilities: %w", err)
		}
		out.Node = types
	}
	return out, nil
}

// RefreshCapabilities recomputes the auto parts of Options.Policy from
// every connection's upstream and advertises the result; with a loop guard (Connections.Guard)
// it also checks every driver: csi connection for a cycle again. It logs
// what changed. Growth after Probe reported ready closes the CSI socket's
// client connections (Options.Accepted), so the sidecars, which read
// capabilities once, restart and read the new set (capswatch.go). It
// returns the new set and the connections that could not be asked.
// Without a Policy, or with nothing auto, it asks for no capability.
//
// A refresh is not a use: it looks at the connections through a
// backend.Survey, so it caches none, keeps none from expiring, and asks
// each distinct upstream client once.
func (d *Driver) RefreshCapabilities(ctx context.Context) (Capabilities, []Unconfirmed) {
	d.refreshMu.Lock()
	defer d.refreshMu.Unlock()
	p := d.opts.Policy
	auto := p != nil && p.Auto()
	if !auto {
		// Nothing advertised depends on the upstreams.
		d.confirm()
	}
	if !auto && d.opts.Connections.Guard() == nil {
		return d.Capabilities(), nil
	}
	ups, unconfirmed, nodeLocal := d.askConnections(ctx, auto)
	d.noteNodeLocal(ctx, nodeLocal)
	if !auto {
		// Only the loop re-check (the loop guard) ran.
		return d.Capabilities(), unconfirmed
	}
	next := p.Aggregate(ups)
	prev := d.Capabilities()
	d.caps.Store(&next)
	if t := d.opts.Accepted; t != nil {
		t.Advertise(next)
	}
	for _, u := range unconfirmed {
		d.log.WarnContext(ctx, "capabilities: connection could not be asked; it adds nothing to what is advertised until it answers",
			"connection", u.Connection, "error", u.Err)
	}
	if !retrying(unconfirmed) {
		d.confirm()
	}
	added, removed := capsDiff(prev, next)
	first := !d.refreshed
	d.refreshed = true
	switch {
	case first:
		d.log.InfoContext(ctx, "advertised capabilities (proxy.capabilities: auto)", "controller", typeNames(next.Controller),
			"node", typeNames(next.Node), "volume_expansion", next.Expansion.String(), "upstreams_asked", len(ups), "unconfirmed", len(unconfirmed))
	case len(added) > 0:
		d.grew(ctx, next, added, removed)
	case len(removed) > 0:
		d.log.WarnContext(ctx, "advertised capabilities shrank; sidecars started earlier still use the old set, and their calls for what was removed fail per connection",
			"removed", strings.Join(removed, ","))
	}
	return next, unconfirmed
}

// askConnections asks the upstream of every connection, each distinct
// client (or pair of controller and node clients) once, refreshWorkers at
// a time, for its capabilities when ask is set; with a loop guard (Connections.Guard) it first
// looks for a cycle again. It returns one UpstreamCaps per upstream asked,
// and, in name order, the node-local connections it saw (the one read of
// every file serves both).
func (d *Driver) askConnections(ctx context.Context, ask bool) ([]UpstreamCaps, []Unconfirmed, []string) {
	names, err := d.opts.Connections.List()
	if err != nil {
		return nil, []Unconfirmed{{Connection: "(all)", Err: fmt.Errorf("cannot list connections in %s: %w", d.opts.Connections.Location(), err), Retry: true}}, nil
	}
	var (
		mu        sync.Mutex
		asked     = map[[2]*upstream.Client]bool{}
		ups       []UpstreamCaps
		bad       []Unconfirmed
		nodeLocal []string
		wg        sync.WaitGroup
		sem       = make(chan struct{}, refreshWorkers)
	)
	unconfirmed := func(name string, err error, retry bool) {
		mu.Lock()
		bad = append(bad, Unconfirmed{Connection: name, Err: err, Retry: retry})
		mu.Unlock()
	}
	var round *backend.Round
	if d.opts.Connections.Guard() != nil {
		round = d.opts.Connections.Guard().NewRound()
	}
	// The survey holds the clients of connections the cache does not,
	// until every look is done.
	survey := d.opts.Connections.Survey()
	defer survey.Close()
	for _, name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, d.opts.CapabilityTimeout)
			defer cancel()
			c, release, err := survey.Look(cctx, name)
			if err != nil {
				unconfirmed(name, err, errors.Is(err, connection.ErrUnavailable))
				return
			}
			defer release()
			if c.IsGroup() {
				return // no upstream of its own; its members are asked
			}
			if c.Topology(d.opts.Topology).NodeLocal() {
				mu.Lock()
				nodeLocal = append(nodeLocal, name)
				mu.Unlock()
			}
			// Look for a cycle again: another proxy's routes-to may have
			// grown since this connection loaded (the two loaded at the
			// same moment). A refused connection fails its calls and is
			// left out of listings (backend.Registry.Get refuses it).
			if g := d.opts.Connections.Guard(); g != nil && c.Config.Driver == config.DriverCSI {
				if err := g.CheckIn(cctx, c, round); err != nil {
					d.log.ErrorContext(ctx, "connection refused: it routes back to this proxy", "connection", name, "error", err)
					unconfirmed(name, err, false)
					return
				}
			}
			if !ask {
				return
			}
			var ctrl, node *upstream.Client
			if d.opts.Mode != ModeNode {
				ctrl = c.Controller
			}
			if d.opts.Mode != ModeController {
				node = c.Node
			}
			key := [2]*upstream.Client{ctrl, node}
			mu.Lock()
			before := asked[key]
			asked[key] = true
			mu.Unlock()
			if before {
				return // counted once, under the connection that asked
			}
			caps, err := AskClients(upstream.WithConnection(cctx, name), ctrl, node)
			if err != nil {
				unconfirmed(name, fmt.Errorf("upstream %s: %w", c.Controller.Target, err), true)
				return
			}
			mu.Lock()
			ups = append(ups, caps)
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.SortFunc(bad, func(a, b Unconfirmed) int { return strings.Compare(a.Connection, b.Connection) })
	slices.Sort(nodeLocal)
	return ups, bad, nodeLocal
}

func typeNames[T fmt.Stringer](ts []T) string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.String()
	}
	return strings.Join(names, ",")
}

// capsDiff names what next advertises that prev did not, and the reverse.
func capsDiff(prev, next Capabilities) (added, removed []string) {
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
