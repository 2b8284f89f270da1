package capability

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

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
// until a later refresh reaches it (retried soon, watch.go; what grows
// then makes the sidecars restart), CONTROLLER_SERVICE is advertised
// only when some upstream has a controller service, and with no
// connection at all only VOLUME_ACCESSIBILITY_CONSTRAINTS (the proxy's
// own) is advertised.

// Refresh recomputes the auto parts of Options.Policy from
// every connection's upstream and advertises the result; with a loop guard (Connections.Guard)
// it also checks every driver: csi connection for a cycle again. It logs
// what changed. Growth after Probe reported ready closes the CSI socket's
// client connections (Options.Tracker), so the sidecars, which read
// capabilities once, restart and read the new set (watch.go). It
// returns the new set and the connections that could not be asked.
// Without a Policy, or with nothing auto, it asks for no capability.
//
// A refresh is not a use: it looks at the connections through a
// backend.Survey, so it caches none, keeps none from expiring, and asks
// each distinct upstream client once.
func (w *Watcher) Refresh(ctx context.Context) (Set, []Unconfirmed) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.opts.Policy
	auto := p != nil && p.Auto()
	if !auto {
		// Nothing advertised depends on the upstreams.
		w.confirm()
	}
	if !auto && w.opts.Source.Guard() == nil {
		return w.Current(), nil
	}
	ups, unconfirmed, nodeLocal := w.askConnections(ctx, auto)
	w.noteNodeLocal(ctx, nodeLocal)
	if !auto {
		// Only the loop re-check (the loop guard) ran.
		return w.Current(), unconfirmed
	}
	next := p.Aggregate(ups)
	prev := w.Current()
	w.set.Store(&next)
	if t := w.opts.Tracker; t != nil {
		t.Advertise(next)
	}
	for _, u := range unconfirmed {
		w.log.WarnContext(ctx, "capabilities: connection could not be asked; it adds nothing to what is advertised until it answers",
			"connection", u.Connection, "error", u.Err)
	}
	if !retrying(unconfirmed) {
		w.confirm()
	}
	added, removed := diff(prev, next)
	first := !w.refreshed
	w.refreshed = true
	switch {
	case first:
		w.log.InfoContext(ctx, "advertised capabilities (proxy.capabilities: auto)", "controller", typeNames(next.Controller),
			"node", typeNames(next.Node), "volume_expansion", next.Expansion.String(), "upstreams_asked", len(ups), "unconfirmed", len(unconfirmed))
	case len(added) > 0:
		w.grew(ctx, next, added, removed)
	case len(removed) > 0:
		w.log.WarnContext(ctx, "advertised capabilities shrank; sidecars started earlier still use the old set, and their calls for what was removed fail per connection",
			"removed", strings.Join(removed, ","))
	}
	return next, unconfirmed
}

// askConnections asks the upstream of every connection, each distinct
// client (or pair of controller and node clients) once, refreshWorkers at
// a time, for its capabilities when ask is set; with a loop guard (Connections.Guard) it first
// looks for a cycle again. It returns one Upstream per upstream asked,
// and, in name order, the node-local connections it saw (the one read of
// every file serves both).
func (w *Watcher) askConnections(ctx context.Context, ask bool) ([]Upstream, []Unconfirmed, []string) {
	names, err := w.opts.Source.List()
	if err != nil {
		return nil, []Unconfirmed{{Connection: "(all)", Err: fmt.Errorf("cannot list connections in %s: %w", w.opts.Source.Location(), err), Retry: true}}, nil
	}
	var (
		mu        sync.Mutex
		asked     = map[[2]*upstream.Client]bool{}
		ups       []Upstream
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
	if w.opts.Source.Guard() != nil {
		round = w.opts.Source.Guard().NewRound()
	}
	// The survey holds the clients of connections the cache does not,
	// until every look is done.
	survey := w.opts.Source.Survey()
	defer survey.Close()
	for _, name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, w.opts.Timeout)
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
			if c.Topology(w.opts.Topology).NodeLocal() {
				mu.Lock()
				nodeLocal = append(nodeLocal, name)
				mu.Unlock()
			}
			// Look for a cycle again: another proxy's routes-to may have
			// grown since this connection loaded (the two loaded at the
			// same moment). A refused connection fails its calls and is
			// left out of listings (backend.Registry.Get refuses it).
			if g := w.opts.Source.Guard(); g != nil && c.Config.Driver == config.DriverCSI {
				if err := g.CheckIn(cctx, c, round); err != nil {
					w.log.ErrorContext(ctx, "connection refused: it routes back to this proxy", "connection", name, "error", err)
					unconfirmed(name, err, false)
					return
				}
			}
			if !ask {
				return
			}
			var ctrl, node *upstream.Client
			if w.opts.AskController {
				ctrl = c.Controller
			}
			if w.opts.AskNode {
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
			caps, err := Ask(upstream.WithConnection(cctx, name), ctrl, node)
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
