package csi_test

import (
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/backend"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
)

func TestIdentity(t *testing.T) {
	f := newFakeUpstream(t)
	p := startProxy(t)
	p.add(t, "a", conn{Endpoint: f.Endpoint})
	ctx := callCtx(t)

	info, err := p.Identity.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(&csi.GetPluginInfoResponse{Name: "proxy.example.com", VendorVersion: "v-test"}, info); d != "" {
		t.Errorf("GetPluginInfo (-want +got):\n%s", d)
	}

	caps, err := p.Identity.GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	svc := func(t csi.PluginCapability_Service_Type) *csi.PluginCapability {
		return &csi.PluginCapability{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: t}}}
	}
	want := &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{
		svc(csi.PluginCapability_Service_CONTROLLER_SERVICE),
		svc(csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS),
		{Type: &csi.PluginCapability_VolumeExpansion_{VolumeExpansion: &csi.PluginCapability_VolumeExpansion{
			Type: csi.PluginCapability_VolumeExpansion_ONLINE}}},
	}}
	if d := diff(want, caps); d != "" {
		t.Errorf("GetPluginCapabilities (-want +got):\n%s", d)
	}

	for _, ready := range []bool{true, false, true} {
		p.Driver.SetReady(ready)
		resp, err := p.Identity.Probe(ctx, &csi.ProbeRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if d := diff(&csi.ProbeResponse{Ready: wrapperspb.Bool(ready)}, resp); d != "" {
			t.Errorf("Probe after SetReady(%t) (-want +got):\n%s", ready, d)
		}
	}
	// Probe answers from memory: a dead storage system must not fail the
	// proxy's liveness probe.
	if got := f.routed(); len(got) != 0 {
		t.Errorf("identity calls reached the upstream: %v", got)
	}
	if n := len(f.requests("Probe")); n != 0 {
		t.Errorf("Probe was forwarded %d times", n)
	}
}

// TestServiceCapabilities checks what the proxy advertises by default.
func TestServiceCapabilities(t *testing.T) {
	p := startProxy(t)
	ctx := callCtx(t)
	ctrl, err := p.Controller.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[csi.ControllerServiceCapability_RPC_Type]bool{}
	for _, c := range ctrl.GetCapabilities() {
		got[c.GetRpc().GetType()] = true
	}
	// SPEC §6; list.go and publish.go may add more.
	for _, want := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY,
		csi.ControllerServiceCapability_RPC_GET_VOLUME,
		csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	} {
		if !got[want] {
			t.Errorf("controller capability %v not advertised", want)
		}
	}
	if got[csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME] {
		t.Error("PUBLISH_UNPUBLISH_VOLUME advertised although controller publishing is off")
	}

	node, err := p.Node.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	gotNode := map[csi.NodeServiceCapability_RPC_Type]bool{}
	for _, c := range node.GetCapabilities() {
		gotNode[c.GetRpc().GetType()] = true
	}
	for _, want := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	} {
		if !gotNode[want] {
			t.Errorf("node capability %v not advertised", want)
		}
	}
}

// TestModes: a process serves only the services of its mode.
func TestModes(t *testing.T) {
	tests := []struct {
		mode                 string
		controller, nodeSide bool
	}{
		{pcsi.ModeAll, true, true},
		{"", true, true},
		{pcsi.ModeController, true, false},
		{pcsi.ModeNode, false, true},
	}
	for _, tt := range tests {
		t.Run("mode="+tt.mode, func(t *testing.T) {
			p := startProxy(t, func(o *pcsi.Options) { o.Mode = tt.mode })
			ctx := callCtx(t)
			if _, err := p.Identity.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{}); err != nil {
				t.Errorf("identity: %v", err)
			}
			_, err := p.Controller.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
			if tt.controller && err != nil {
				t.Errorf("controller: %v", err)
			} else if !tt.controller {
				testkit.WantCode(t, err, codes.Unimplemented)
			}
			_, err = p.Node.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
			if tt.nodeSide && err != nil {
				t.Errorf("node: %v", err)
			} else if !tt.nodeSide {
				testkit.WantCode(t, err, codes.Unimplemented)
			}
		})
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	registry := backend.New(backend.Options{Catalogue: connection.NewStore(connection.Options{Folder: t.TempDir()})})
	tests := map[string]pcsi.Options{
		"no connections": {},
		"bad mode":       {Connections: registry, Mode: "both"},
	}
	for name, o := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := pcsi.New(o); err == nil {
				t.Error("New succeeded")
			}
		})
	}
}
