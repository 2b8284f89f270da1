package csi_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/backend"
)

// startGuardedProxy serves a proxy whose registry refuses connections that
// route back to it, as serve wires it; own are the endpoints the guard
// knows as its own.
func startGuardedProxy(t *testing.T, own ...string) (*testProxy, *backend.SelfGuard) {
	t.Helper()
	g := backend.NewSelfGuard(own...)
	p := startProxyGuard(t, g, nil)
	return p, g
}

// TestSelfRouteOwnSocket: a connection naming the proxy's own socket, by
// its path or through a symlinked directory, is refused when it loads,
// naming the key; nothing is forwarded to it.
func TestSelfRouteOwnSocket(t *testing.T) {
	dir := testkit.SocketDir(t)
	own := filepath.Join(dir, "csi.sock")
	if err := os.Symlink(dir, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	p, _ := startGuardedProxy(t, "unix://"+own)
	p.add(t, "direct", conn{Endpoint: "unix://" + own})
	p.add(t, "via-link", conn{Endpoint: "unix://" + filepath.Join(dir, "link", "csi.sock")})
	for _, name := range []string{"direct", "via-link"} {
		_, err := p.Controller.CreateVolume(callCtx(t), createReq("pvc-1", map[string]string{"connection": name}))
		testkit.WantCode(t, err, codes.FailedPrecondition, `connection "`+name+`"`, "csi.endpoint", "this proxy's own socket")
	}
	if !backend.SameSocket("unix:"+own, "unix://"+filepath.Join(dir, ".", "csi.sock")) || backend.SameSocket("unix://"+own, "127.0.0.1:9000") {
		t.Error("SameSocket")
	}
}

// TestSelfRouteSameProcess: reached by a path the guard does not know (a
// forwarder, another mount of the socket), the upstream answers
// GetPluginInfo with this process's instance marker, and is refused.
func TestSelfRouteSameProcess(t *testing.T) {
	p, g := startGuardedProxy(t) // knows no path of its own
	p.add(t, "loop", conn{Endpoint: p.Endpoint})
	_, err := p.Controller.ListSnapshots(callCtx(t), &csi.ListSnapshotsRequest{SnapshotId: "s:loop/x"})
	testkit.WantCode(t, err, codes.FailedPrecondition, `connection "loop"`, "answers as this very proxy", g.Instance())
	// The listing that would recurse without end skips it instead.
	if _, err := p.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{}); err != nil {
		t.Fatalf("ListVolumes: %v", err)
	}
}

// TestSelfRouteChain: two proxies routing to each other. The first to load
// its connection accepts it and learns the other's marker; the other then
// sees itself in the first one's routes-to and refuses, so the cycle is
// cut and a listing through either ends.
func TestSelfRouteChain(t *testing.T) {
	up := newFakeUpstream(t, withControllerCaps(listCaps...), withVolumes("u1"))
	a, ga := startGuardedProxy(t)
	b, gb := startGuardedProxy(t)
	a.add(t, "to-b", conn{Endpoint: b.Endpoint})
	a.add(t, "storage", conn{Endpoint: up.Endpoint})
	b.add(t, "to-a", conn{Endpoint: a.Endpoint})

	// a loads to-b: b routes nowhere yet, so it is accepted.
	if _, err := a.Controller.ControllerGetVolume(callCtx(t), &csi.ControllerGetVolumeRequest{VolumeId: "v:to-b/v:x/h"}); err != nil && strings.Contains(err.Error(), "route") {
		t.Fatalf("a refused to-b before any cycle existed: %v", err)
	}
	if got := ga.Manifest()[backend.ManifestRoutesTo]; got != gb.Instance() {
		t.Fatalf("a's routes-to = %q, want b's instance %s", got, gb.Instance())
	}
	// b loads to-a: a routes to b, so it is a cycle.
	_, err := b.Controller.CreateVolume(callCtx(t), createReq("pvc-1", map[string]string{"connection": "to-a"}))
	testkit.WantCode(t, err, codes.FailedPrecondition, `connection "to-a"`, "another proxy-topology", "route back to this proxy")

	// A listing through a reaches b, whose to-a is refused (and skipped),
	// and ends.
	resp, err := a.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if d := diff([]string{"v:storage/u1"}, volumeIDs(resp.GetEntries())); d != "" {
		t.Errorf("volumes through a (-want +got):\n%s", d)
	}
	info, err := b.Identity.GetPluginInfo(callCtx(t), &csi.GetPluginInfoRequest{})
	if err != nil || info.GetManifest()[backend.ManifestInstance] != gb.Instance() {
		t.Errorf("b's GetPluginInfo manifest %v, %v", info.GetManifest(), err)
	}
}

// TestSelfRouteRecheckedOnRefresh: two proxies that load their connections
// to each other at the same moment both accept them (neither routes-to
// holds the other yet). The capability refresh looks again, finds this
// proxy in the upstream's routes-to, and refuses the connection from then
// on: its calls fail and listings skip it.
func TestSelfRouteRecheckedOnRefresh(t *testing.T) {
	other := newFakeUpstream(t, withControllerCaps(listCaps...), withVolumes("x1"))
	manifest := func(routes string) *csi.GetPluginInfoResponse {
		m := map[string]string{backend.ManifestInstance: "other-proxy"}
		if routes != "" {
			m[backend.ManifestRoutesTo] = routes
		}
		return &csi.GetPluginInfoResponse{Name: "proxy.example.com", VendorVersion: "v", Manifest: m}
	}
	other.setResponse("GetPluginInfo", manifest(""))
	p, g := startGuardedProxy(t)
	p.add(t, "to-other", conn{Endpoint: other.Endpoint})
	resp, err := p.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{})
	if err != nil || len(resp.GetEntries()) != 1 {
		t.Fatalf("before the cycle shows: %v, %v", resp, err)
	}
	// The other proxy has since loaded its connection back here.
	other.setResponse("GetPluginInfo", manifest(g.Instance()))
	p.Driver.RefreshCapabilities(callCtx(t))
	resp, err = p.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{})
	if err != nil || len(resp.GetEntries()) != 0 {
		t.Errorf("listing after the re-check: %v, %v; want the refused connection skipped", resp, err)
	}
	_, err = p.Controller.ControllerGetVolume(callCtx(t), &csi.ControllerGetVolumeRequest{VolumeId: "v:to-other/x1"})
	testkit.WantCode(t, err, codes.FailedPrecondition, `connection "to-other" is refused`, "route back to this proxy")
	// Fixed on the other side: the next re-check accepts it again.
	other.setResponse("GetPluginInfo", manifest(""))
	p.Driver.RefreshCapabilities(callCtx(t))
	if resp, err := p.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{}); err != nil || len(resp.GetEntries()) != 1 {
		t.Errorf("after the cycle is gone: %v, %v", resp, err)
	}
}

// TestSelfRouteRecheckAsksEachUpstreamOnce: the periodic re-check asks an
// upstream that many connections share for GetPluginInfo once per round,
// not once per connection (ten thousand connections to one storage system
// would otherwise cost ten thousand calls a minute), and a cycle it finds
// still refuses every one of them.
func TestSelfRouteRecheckAsksEachUpstreamOnce(t *testing.T) {
	up := newFakeUpstream(t, withControllerCaps(listCaps...))
	p, g := startGuardedProxy(t)
	const n = 20
	for i := range n {
		p.add(t, fmt.Sprintf("c%02d", i), conn{Endpoint: up.Endpoint})
	}
	// Load them all (each load checks on its own), then count one round.
	if _, err := p.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{}); err != nil {
		t.Fatal(err)
	}
	before := len(up.requests("GetPluginInfo"))
	p.Driver.RefreshCapabilities(callCtx(t))
	if asked := len(up.requests("GetPluginInfo")) - before; asked != 1 {
		t.Errorf("one re-check round of %d connections to one upstream asked GetPluginInfo %d times, want 1", n, asked)
	}
	up.setResponse("GetPluginInfo", &csi.GetPluginInfoResponse{Name: "proxy.example.com", VendorVersion: "v",
		Manifest: map[string]string{backend.ManifestInstance: "other", backend.ManifestRoutesTo: g.Instance()}})
	p.Driver.RefreshCapabilities(callCtx(t))
	for i := range n {
		_, err := p.Controller.ControllerGetVolume(callCtx(t), &csi.ControllerGetVolumeRequest{VolumeId: fmt.Sprintf("v:c%02d/x", i)})
		testkit.WantCode(t, err, codes.FailedPrecondition, "is refused", "route back to this proxy")
	}
}

// TestSelfRouteRefusalAtLoadLifts: a connection refused when it loads
// (the upstream already routes back) is refused only while the latest
// check refuses it (docs/operations.md): a re-check that passes makes it
// usable with no change to its file, and a rewrite of the file as
// local-hostpath, which cannot route back, clears a refusal at once.
func TestSelfRouteRefusalAtLoadLifts(t *testing.T) {
	other := newFakeUpstream(t, withControllerCaps(listCaps...), withVolumes("x1"))
	p, g := startGuardedProxy(t)
	loop := &csi.GetPluginInfoResponse{Name: "proxy.example.com", VendorVersion: "v",
		Manifest: map[string]string{backend.ManifestInstance: "other-proxy", backend.ManifestRoutesTo: g.Instance()}}
	other.setResponse("GetPluginInfo", loop)
	p.add(t, "to-other", conn{Endpoint: other.Endpoint})
	list := func() []*csi.ListVolumesResponse_Entry {
		t.Helper()
		resp, err := p.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetEntries()
	}
	_, err := p.Controller.ControllerGetVolume(callCtx(t), &csi.ControllerGetVolumeRequest{VolumeId: "v:to-other/x1"})
	testkit.WantCode(t, err, codes.FailedPrecondition, `connection "to-other" is refused`, "route back to this proxy")
	if n := len(list()); n != 0 {
		t.Errorf("refused at load: listed %d volumes, want the connection skipped", n)
	}

	other.setResponse("GetPluginInfo", &csi.GetPluginInfoResponse{Name: "proxy.example.com", VendorVersion: "v",
		Manifest: map[string]string{backend.ManifestInstance: "other-proxy"}})
	p.Driver.RefreshCapabilities(callCtx(t))
	if n := len(list()); n != 1 {
		t.Errorf("after a passing re-check: listed %d volumes, want 1", n)
	}

	other.setResponse("GetPluginInfo", loop)
	p.Driver.RefreshCapabilities(callCtx(t))
	if n := len(list()); n != 0 {
		t.Fatalf("refused again: listed %d volumes, want none", n)
	}
	p.write(t, "to-other", "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: "+t.TempDir()+"\n")
	_, err = p.Controller.ControllerGetVolume(callCtx(t), &csi.ControllerGetVolumeRequest{VolumeId: "v:to-other/x1"})
	if err != nil && strings.Contains(err.Error(), "refused") {
		t.Errorf("rewritten as local-hostpath: %v, want the refusal gone", err)
	}
	if err := g.Refused("to-other"); err != nil {
		t.Errorf("rewritten as local-hostpath: the guard still refuses it: %v", err)
	}
}
