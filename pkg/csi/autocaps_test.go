package csi_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/capability"
	"github.com/democratic-csi/proxy-topology/pkg/config"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
)

type ctrlCap = csi.ControllerServiceCapability_RPC_Type
type nodeCap = csi.NodeServiceCapability_RPC_Type

// withPolicy serves with proxy.capabilities resolved from c.
func withPolicy(t *testing.T, c config.Capabilities, publish bool) func(*pcsi.Options) {
	t.Helper()
	p, err := capability.NewPolicy(c, publish)
	if err != nil {
		t.Fatal(err)
	}
	return func(o *pcsi.Options) {
		o.Policy = &p
		o.CapabilityTimeout = 500 * time.Millisecond
	}
}

// withExpansion makes a fake advertise a VOLUME_EXPANSION plugin capability.
func withExpansion(e csi.PluginCapability_VolumeExpansion_Type) fakeOption {
	return func(f *fakeUpstream) {
		f.responses["GetPluginCapabilities"] = &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{
			{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}}},
			{Type: &csi.PluginCapability_VolumeExpansion_{VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: e}}},
		}}
	}
}

// advertised reads what the proxy advertises over gRPC.
func advertised(t *testing.T, p *testProxy) capability.Set {
	t.Helper()
	ctx := callCtx(t)
	var out capability.Set
	cr, err := p.Controller.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	out.Controller = []ctrlCap{}
	for _, c := range cr.GetCapabilities() {
		out.Controller = append(out.Controller, c.GetRpc().GetType())
	}
	nr, err := p.Node.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	out.Node = []nodeCap{}
	for _, c := range nr.GetCapabilities() {
		out.Node = append(out.Node, c.GetRpc().GetType())
	}
	pr, err := p.Identity.GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	topology := false
	for _, c := range pr.GetCapabilities() {
		if e := c.GetVolumeExpansion(); e != nil {
			out.Expansion = e.GetType()
		}
		switch c.GetService().GetType() {
		case csi.PluginCapability_Service_CONTROLLER_SERVICE:
			out.ControllerService = true
		case csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS:
			topology = true
		}
	}
	if !topology {
		t.Errorf("plugin capabilities %v: want VOLUME_ACCESSIBILITY_CONSTRAINTS always", pr.GetCapabilities())
	}
	return out
}

// TestAutoCapabilities (SPEC §6): auto advertises what the proxy
// implements intersected with the union of its upstreams, per service and
// for online/offline expansion; it grows (with a warning to restart the
// sidecars) when a connection that adds something appears.
func TestAutoCapabilities(t *testing.T) {
	a := newFakeUpstream(t,
		withControllerCaps(csi.ControllerServiceCapability_RPC_LIST_VOLUMES, csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
			// Not something the proxy implements: never advertised.
			csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES),
		withNodeCaps(csi.NodeServiceCapability_RPC_GET_VOLUME_STATS),
		withExpansion(csi.PluginCapability_VolumeExpansion_OFFLINE))
	b := newFakeUpstream(t,
		withControllerCaps(csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT),
		withNodeCaps())
	// A node-only driver: no controller service at all.
	nodeOnly := newFakeUpstream(t, withNodeCaps(csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME))
	nodeOnly.setUnimplemented("ControllerGetCapabilities")
	p := startProxy(t, withPolicy(t, config.Capabilities{}, false))

	// Before the first refresh nothing is confirmed, so nothing is
	// advertised.
	if d := diff(capability.Set{Controller: []ctrlCap{}, Node: []nodeCap{}}, advertised(t, p)); d != "" {
		t.Errorf("before any refresh (-want +got):\n%s", d)
	}
	p.add(t, "a", conn{Endpoint: a.Endpoint})
	p.add(t, "b", conn{Endpoint: b.Endpoint})
	p.add(t, "c-shares-a", conn{Endpoint: a.Endpoint})
	p.add(t, "node-only", conn{Endpoint: nodeOnly.Endpoint})
	_, unconfirmed := p.Driver.RefreshCapabilities(callCtx(t))
	if len(unconfirmed) != 0 {
		t.Fatalf("unconfirmed %v", unconfirmed)
	}
	want := capability.Set{
		// In the proxy's order, not the upstreams'.
		Controller: []ctrlCap{csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
			csi.ControllerServiceCapability_RPC_LIST_VOLUMES},
		Node:              []nodeCap{csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME, csi.NodeServiceCapability_RPC_GET_VOLUME_STATS},
		Expansion:         csi.PluginCapability_VolumeExpansion_OFFLINE,
		ControllerService: true,
	}
	if d := diff(want, advertised(t, p)); d != "" {
		t.Errorf("auto (-want +got):\n%s", d)
	}
	if strings.Contains(p.Logs.String(), "grew") {
		t.Errorf("the first refresh warned about growth:\n%s", p.Logs.String())
	}

	// A connection that expands online and reports capacity: both grow,
	// and the log says to restart the sidecars.
	online := newFakeUpstream(t, withControllerCaps(csi.ControllerServiceCapability_RPC_GET_CAPACITY), withNodeCaps(),
		withExpansion(csi.PluginCapability_VolumeExpansion_ONLINE))
	p.add(t, "d", conn{Endpoint: online.Endpoint})
	p.Driver.RefreshCapabilities(callCtx(t))
	got := advertised(t, p)
	if got.Expansion != csi.PluginCapability_VolumeExpansion_ONLINE || !containsCap(got.Controller, csi.ControllerServiceCapability_RPC_GET_CAPACITY) {
		t.Errorf("after adding d: %v", got)
	}
	logs := p.Logs.String()
	for _, part := range []string{"advertised capabilities grew", "restart them", "controller:GET_CAPACITY", "expansion:ONLINE"} {
		if !strings.Contains(logs, part) {
			t.Errorf("log lacks %q:\n%s", part, logs)
		}
	}

	// Removing connections shrinks it again.
	for _, n := range []string{"a", "c-shares-a", "d", "node-only"} {
		p.remove(t, n)
	}
	p.Driver.RefreshCapabilities(callCtx(t))
	// b answers no GetPluginCapabilities, but its controller service
	// answers ControllerGetCapabilities.
	want = capability.Set{Controller: []ctrlCap{csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT}, Node: []nodeCap{}, ControllerService: true}
	if d := diff(want, advertised(t, p)); d != "" {
		t.Errorf("after removals (-want +got):\n%s", d)
	}

	// Only the node-only driver: no CONTROLLER_SERVICE (csi-sanity's node
	// tests would otherwise create volumes through a controller that
	// cannot).
	p.remove(t, "b")
	p.add(t, "node-only", conn{Endpoint: nodeOnly.Endpoint})
	p.Driver.RefreshCapabilities(callCtx(t))
	want = capability.Set{Controller: []ctrlCap{}, Node: []nodeCap{csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}}
	if d := diff(want, advertised(t, p)); d != "" {
		t.Errorf("node-only (-want +got):\n%s", d)
	}
	if !strings.Contains(p.Logs.String(), "advertised capabilities shrank") {
		t.Errorf("no warning about shrinking:\n%s", p.Logs.String())
	}
}

func containsCap(list []ctrlCap, c ctrlCap) bool {
	for _, x := range list {
		if x == c {
			return true
		}
	}
	return false
}

// TestAutoCapabilitiesUnreachable: an upstream that cannot be asked (no
// socket, or hung) adds nothing and is named; a broken connection file
// likewise; the refresh is bounded by the capability timeout and Probe
// answers meanwhile.
func TestAutoCapabilitiesUnreachable(t *testing.T) {
	good := newFakeUpstream(t, withControllerCaps(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME), withNodeCaps())
	hung := newFakeUpstream(t, withDelayAll(time.Minute))
	// The hung upstream holds the refresh for the whole capability
	// timeout, long enough to see Probe answer in the meantime.
	p := startProxy(t, withPolicy(t, config.Capabilities{}, false), func(o *pcsi.Options) { o.CapabilityTimeout = 2 * time.Second })
	p.add(t, "good", conn{Endpoint: good.Endpoint})
	p.add(t, "gone", conn{Endpoint: "unix://" + filepath.Join(testkit.SocketDir(t), "nothing.sock")})
	p.add(t, "hung", conn{Endpoint: hung.Endpoint})
	p.write(t, "broken", "driver: csi\n")
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, unconfirmed := p.Driver.RefreshCapabilities(callCtx(t))
		var names []string
		for _, u := range unconfirmed {
			names = append(names, u.Connection)
		}
		if got := strings.Join(names, ","); got != "broken,gone,hung" {
			t.Errorf("unconfirmed = %s, want broken,gone,hung", got)
		}
	}()
	// Probe never waits for a refresh: it answers while the refresh is
	// still waiting for the hung upstream.
	if _, err := p.Identity.Probe(callCtx(t), &csi.ProbeRequest{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		t.Error("Probe answered only after the refresh ended")
	default:
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the refresh is not bounded by the capability timeout")
	}
	if d := diff(capability.Set{Controller: []ctrlCap{csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME}, Node: []nodeCap{}, ControllerService: true}, advertised(t, p)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if logs := p.Logs.String(); !strings.Contains(logs, "could not be asked") || !strings.Contains(logs, `"connection":"hung"`) {
		t.Errorf("no warning naming the unreachable upstream:\n%s", logs)
	}
}

// TestExplicitCapabilitiesReplaceAuto: a list given in proxy.capabilities
// is advertised as it is, whatever the upstreams say; the parts not given
// stay auto.
func TestExplicitCapabilitiesReplaceAuto(t *testing.T) {
	f := newFakeUpstream(t, withControllerCaps(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME),
		withNodeCaps(csi.NodeServiceCapability_RPC_GET_VOLUME_STATS), withExpansion(csi.PluginCapability_VolumeExpansion_ONLINE))
	p := startProxy(t, withPolicy(t, config.Capabilities{Controller: []string{"GET_CAPACITY"}, VolumeExpansion: "offline"}, false))
	p.add(t, "a", conn{Endpoint: f.Endpoint})
	p.Driver.RefreshCapabilities(callCtx(t))
	want := capability.Set{
		Controller:        []ctrlCap{csi.ControllerServiceCapability_RPC_GET_CAPACITY},
		Node:              []nodeCap{csi.NodeServiceCapability_RPC_GET_VOLUME_STATS},
		Expansion:         csi.PluginCapability_VolumeExpansion_OFFLINE,
		ControllerService: true,
	}
	if d := diff(want, advertised(t, p)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if _, err := capability.NewPolicy(config.Capabilities{Node: []string{"NOPE"}}, false); err == nil || !strings.Contains(err.Error(), `proxy.capabilities.node[0]: "NOPE"`) {
		t.Errorf("NewPolicy error = %v", err)
	}
}

// TestWatchCapabilitiesKick: ConnectionsChanged makes the watcher refresh
// without waiting for its interval.
func TestWatchCapabilitiesKick(t *testing.T) {
	f := newFakeUpstream(t, withControllerCaps(csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS), withNodeCaps())
	p := startProxy(t, withPolicy(t, config.Capabilities{}, false))
	ctx := callCtx(t)
	stopped := make(chan struct{})
	wctx, cancel := context.WithCancel(ctx)
	go func() { defer close(stopped); p.Driver.WatchCapabilities(wctx, time.Hour) }()
	defer func() { cancel(); <-stopped }()
	p.add(t, "a", conn{Endpoint: f.Endpoint})
	p.Driver.ConnectionsChanged()
	deadline := time.Now().Add(15 * time.Second)
	for !containsCap(p.Driver.Capabilities().Controller, csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS) {
		if time.Now().After(deadline) {
			t.Fatal("no refresh after ConnectionsChanged")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
