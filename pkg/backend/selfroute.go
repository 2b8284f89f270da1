package backend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"

	pendpoint "github.com/democratic-csi/proxy-topology/pkg/endpoint"
	"github.com/democratic-csi/proxy-topology/pkg/upstream"
)

// A connection that routes back to this proxy would make every listing
// recurse into itself without end (the fan-out lists the connection, which
// lists the proxy, which fans out again…). SelfGuard refuses such a
// connection when the Registry builds its clients, never follows it:
//
//   - its endpoint is this proxy's own socket (paths compared after
//     resolving symlinks, and by inode when both exist);
//   - its upstream answers GetPluginInfo with this process's instance
//     marker (the same socket reached another way, e.g. through a TCP
//     forwarder), or with a routes-to list holding it: another
//     proxy-topology that routes back here. Each proxy publishes, in its
//     GetPluginInfo manifest, its own random instance marker and the
//     markers of the proxies its connections reach (learned the same way
//     when they loaded), so whichever proxy of a cycle loads its
//     connection last sees itself and refuses it.
//
// An upstream that does not answer GetPluginInfo in time is accepted: a
// loop cannot be proven, and a dead storage system must not make its
// connection unusable once it is back.
type SelfGuard struct {
	instance string
	// own are this proxy's socket paths (unix endpoints only).
	own []string
	// timeout bounds the GetPluginInfo call; 0 means 3s.
	timeout time.Duration

	mu     sync.Mutex
	routes map[string][]string // connection name -> instances it reaches
	// refused holds the connections whose latest check refused them,
	// when their clients were built or at a re-check (the capability refresh):
	// two proxies that loaded their connections to each other at the same
	// moment both accepted them, and only a later look at each other's
	// routes-to shows the cycle.
	refused map[string]error
}

// Manifest keys of GetPluginInfo that carry the loop guard's markers.
const (
	ManifestInstance = "org.democratic-csi.proxy-topology/instance"
	ManifestRoutesTo = "org.democratic-csi.proxy-topology/routes-to"
)

// maxRoutes bounds the routes-to list a proxy publishes and accepts.
const maxRoutes = 64

// NewSelfGuard returns a guard with a fresh instance marker for a proxy
// serving on the given endpoints (unix:// ones are compared; others are
// ignored).
func NewSelfGuard(endpoints ...string) *SelfGuard {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	g := &SelfGuard{instance: hex.EncodeToString(b), routes: map[string][]string{}, refused: map[string]error{}, timeout: 3 * time.Second}
	for _, ep := range endpoints {
		if p := socketPath(ep); p != "" {
			g.own = append(g.own, p)
		}
	}
	return g
}

// NewSelfGuardAs is NewSelfGuard for another process's instance marker:
// check vets connections on behalf of the proxy serving on endpoints,
// whose marker it reads from that proxy's GetPluginInfo.
func NewSelfGuardAs(instance string, endpoints ...string) *SelfGuard {
	g := NewSelfGuard(endpoints...)
	if instance != "" {
		g.instance = instance
	}
	return g
}

// Instance is this process's marker.
func (g *SelfGuard) Instance() string { return g.instance }

// Manifest is what GetPluginInfo adds to its manifest.
func (g *SelfGuard) Manifest() map[string]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var all []string
	for _, r := range g.routes {
		for _, x := range r {
			if !slices.Contains(all, x) {
				all = append(all, x)
			}
		}
	}
	slices.Sort(all)
	if len(all) > maxRoutes {
		all = all[:maxRoutes]
	}
	m := map[string]string{ManifestInstance: g.instance}
	if len(all) > 0 {
		m[ManifestRoutesTo] = strings.Join(all, ",")
	}
	return m
}

// Check refuses a driver: csi connection whose endpoint is this proxy's
// socket or whose upstream routes back to this proxy, naming the key and
// what was found; the Registry runs it when it builds a connection's
// clients. Its verdict is also what
// Refused reports for the connection until the next Check of it.
func (g *SelfGuard) Check(ctx context.Context, c *Conn) error {
	return g.CheckIn(ctx, c, nil)
}

// CheckIn is Check within a round of checks (NewRound): an upstream client
// shared by many connections is asked once per round, not once per
// connection, so the periodic re-check of ten thousand connections to one
// storage system costs one GetPluginInfo. A nil round asks every time.
func (g *SelfGuard) CheckIn(ctx context.Context, c *Conn, r *Round) error {
	err := g.check(ctx, c, r)
	g.mu.Lock()
	if err != nil {
		g.refused[c.Name] = err
		delete(g.routes, c.Name)
	} else {
		delete(g.refused, c.Name)
	}
	g.mu.Unlock()
	return err
}

// Forget drops what the guard knows of the connection called name (its
// refusal, the proxies it reaches): its file now names no driver: csi
// upstream, so it cannot route back.
func (g *SelfGuard) Forget(name string) {
	g.mu.Lock()
	delete(g.refused, name)
	delete(g.routes, name)
	g.mu.Unlock()
}

// Refused is the error of the last Check of the connection called name,
// nil if it passed, was never checked, or was forgotten.
func (g *SelfGuard) Refused(name string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.refused[name]
}

func (g *SelfGuard) check(ctx context.Context, c *Conn, r *Round) error {
	eps := []struct{ key, value string }{{"csi.endpoint", c.Config.CSI.Endpoint}}
	if c.Config.CSI.NodeEndpoint != "" {
		eps = append(eps, struct{ key, value string }{"csi.nodeEndpoint", c.Config.CSI.NodeEndpoint})
	}
	for _, ep := range eps {
		for _, own := range g.own {
			if SameSocket(ep.value, "unix://"+own) {
				return fmt.Errorf("%s %s is this proxy's own socket: calls would loop back into the proxy", ep.key, ep.value)
			}
		}
	}
	clients := []*upstream.Client{c.Controller}
	if c.Node != nil && c.Node != c.Controller {
		clients = append(clients, c.Node)
	}
	var reached []string
	for i, cl := range clients {
		inst, routes, ok := r.ask(ctx, g, cl)
		if !ok {
			continue
		}
		if inst == g.instance {
			return fmt.Errorf("%s %s answers as this very proxy (GetPluginInfo instance %s): calls would loop back into the proxy", eps[min(i, len(eps)-1)].key, cl.Target, inst)
		}
		if slices.Contains(routes, g.instance) {
			return fmt.Errorf("%s %s is another proxy-topology (instance %s) whose connections route back to this proxy: a cycle, which would make listings recurse without end", eps[min(i, len(eps)-1)].key, cl.Target, inst)
		}
		if inst != "" {
			reached = append(reached, inst)
			reached = append(reached, routes...)
		}
	}
	g.mu.Lock()
	if len(reached) > 0 {
		g.routes[c.Name] = reached
	} else {
		delete(g.routes, c.Name)
	}
	g.mu.Unlock()
	return nil
}

// Round remembers, for one round of re-checks, what each upstream client
// answered to GetPluginInfo. Its zero value is not usable; a nil *Round
// remembers nothing.
type Round struct {
	mu     sync.Mutex
	answer map[*upstream.Client]*roundAnswer
}

type roundAnswer struct {
	done     chan struct{}
	instance string
	routes   []string
	ok       bool
}

// NewRound starts a round of checks (CheckIn).
func (g *SelfGuard) NewRound() *Round {
	return &Round{answer: map[*upstream.Client]*roundAnswer{}}
}

// ask is g.ask once per client in the round; callers asking for a client
// whose answer is on its way wait for it.
func (r *Round) ask(ctx context.Context, g *SelfGuard, cl *upstream.Client) (string, []string, bool) {
	if r == nil {
		return g.ask(ctx, cl)
	}
	r.mu.Lock()
	a, asked := r.answer[cl]
	if !asked {
		a = &roundAnswer{done: make(chan struct{})}
		r.answer[cl] = a
	}
	r.mu.Unlock()
	if !asked {
		a.instance, a.routes, a.ok = g.ask(ctx, cl)
		close(a.done)
		return a.instance, a.routes, a.ok
	}
	select {
	case <-a.done:
		return a.instance, a.routes, a.ok
	case <-ctx.Done():
		return "", nil, false
	}
}

// ask calls GetPluginInfo; ok is false when the upstream did not answer.
func (g *SelfGuard) ask(ctx context.Context, cl *upstream.Client) (instance string, routes []string, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	resp, err := cl.Identity.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil {
		return "", nil, false
	}
	m := resp.GetManifest()
	if r := m[ManifestRoutesTo]; r != "" {
		routes = strings.Split(r, ",")
		if len(routes) > maxRoutes {
			routes = routes[:maxRoutes]
		}
	}
	return m[ManifestInstance], routes, true
}

// socketPath is the file of a unix endpoint, "" for anything else.
func socketPath(ep string) string {
	if e, err := pendpoint.Parse(ep, pendpoint.UnixURL); err == nil {
		return e.Address
	}
	return ""
}

// SameSocket reports whether two endpoints name the same unix socket: the
// same path once symlinks are resolved, or the same file.
func SameSocket(a, b string) bool {
	pa, pb := socketPath(a), socketPath(b)
	if pa == "" || pb == "" {
		return false
	}
	if pa == pb || resolve(pa) == resolve(pb) {
		return true
	}
	fa, errA := os.Stat(pa)
	fb, errB := os.Stat(pb)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// resolve resolves symlinks in p's directory (the socket itself may not
// exist yet).
func resolve(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
		return filepath.Join(dir, filepath.Base(p))
	}
	return p
}
