package csi_test

import (
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/democratic-csi/proxy-topology/pkg/capability"
	"github.com/democratic-csi/proxy-topology/pkg/config"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
)

// TestResolveCapabilities: proxy.capabilities selects a subset of what the
// proxy supports, in the admin's order; anything else is an error naming
// the key path.
func TestResolveCapabilities(t *testing.T) {
	type ctrl = csi.ControllerServiceCapability_RPC_Type
	type node = csi.NodeServiceCapability_RPC_Type
	tests := []struct {
		name       string
		controller []string
		node       []string
		publish    bool
		// wantController/wantNode nil: the defaults, checked separately.
		wantController []ctrl
		wantNode       []node
		wantErr        []string // substrings, each on its own line of the error
	}{
		{
			name:           "subsets in the admin's order",
			controller:     []string{"LIST_VOLUMES", "CREATE_DELETE_VOLUME"},
			node:           []string{"GET_VOLUME_STATS", "STAGE_UNSTAGE_VOLUME"},
			wantController: []ctrl{csi.ControllerServiceCapability_RPC_LIST_VOLUMES, csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME},
			wantNode:       []node{csi.NodeServiceCapability_RPC_GET_VOLUME_STATS, csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME},
		},
		{
			name:           "publishing with controllerPublish",
			controller:     []string{"PUBLISH_UNPUBLISH_VOLUME", "GET_CAPACITY"},
			publish:        true,
			wantController: []ctrl{csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME, csi.ControllerServiceCapability_RPC_GET_CAPACITY},
		},
		{
			name:       "publishing without controllerPublish",
			controller: []string{"CREATE_DELETE_VOLUME", "PUBLISH_UNPUBLISH_VOLUME"},
			wantErr:    []string{`proxy.capabilities.controller[1]: "PUBLISH_UNPUBLISH_VOLUME" is not a controller capability the proxy supports (set proxy.controllerPublish: true)`},
		},
		{
			name:       "unknown names",
			controller: []string{"LIST_VOLUMES", "LIST_VOLUME", "UNKNOWN", "LIST_VOLUMES_PUBLISHED_NODES"},
			node:       []string{"GET_STORAGE_HEALTH", "stage_unstage_volume"},
			wantErr: []string{
				`proxy.capabilities.controller[1]: "LIST_VOLUME" is not a controller capability the proxy supports`,
				`proxy.capabilities.controller[2]: "UNKNOWN"`,
				`proxy.capabilities.controller[3]: "LIST_VOLUMES_PUBLISHED_NODES"`,
				`proxy.capabilities.node[0]: "GET_STORAGE_HEALTH" is not a node capability the proxy supports`,
				`proxy.capabilities.node[1]: "stage_unstage_volume"`,
			},
		},
		{
			name:    "a node capability under controller",
			node:    []string{"CREATE_DELETE_VOLUME"},
			wantErr: []string{`proxy.capabilities.node[0]: "CREATE_DELETE_VOLUME"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := capability.Resolve(tt.controller, tt.node, tt.publish)
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("no error; got %v", got)
				}
				lines := strings.Split(err.Error(), "\n")
				if len(lines) != len(tt.wantErr) {
					t.Errorf("%d errors, want %d:\n%v", len(lines), len(tt.wantErr), err)
				}
				for i, want := range tt.wantErr {
					if i < len(lines) && !strings.Contains(lines[i], want) {
						t.Errorf("error %d = %q, want it to contain %q", i, lines[i], want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := diff(tt.wantController, got.Controller); tt.wantController != nil && d != "" {
				t.Errorf("controller (-want +got):\n%s", d)
			}
			if d := diff(tt.wantNode, got.Node); tt.wantNode != nil && d != "" {
				t.Errorf("node (-want +got):\n%s", d)
			}
		})
	}
}

// TestResolveCapabilitiesDefaults: no list means everything, with
// PUBLISH_UNPUBLISH_VOLUME and PUBLISH_READONLY only when controller
// publishing is on.
func TestResolveCapabilitiesDefaults(t *testing.T) {
	off, err := capability.Resolve(nil, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	on, err := capability.Resolve(nil, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	pub := csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME
	readonly := csi.ControllerServiceCapability_RPC_PUBLISH_READONLY
	for _, c := range off.Controller {
		if c == pub || c == readonly {
			t.Errorf("%v advertised without controllerPublish", c)
		}
	}
	if d := diff(append([]csi.ControllerServiceCapability_RPC_Type{pub, readonly}, off.Controller...), on.Controller); d != "" {
		t.Errorf("with controllerPublish (-want +got):\n%s", d)
	}
	for _, want := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES, csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY, csi.ControllerServiceCapability_RPC_MODIFY_VOLUME,
	} {
		found := false
		for _, c := range off.Controller {
			found = found || c == want
		}
		if !found {
			t.Errorf("%v is not advertised by default", want)
		}
	}
	if d := diff(off.Node, on.Node); d != "" || len(off.Node) == 0 {
		t.Errorf("node capabilities depend on controllerPublish or are empty (-off +on):\n%s", d)
	}
}

// TestAdvertisedSubset: the driver advertises exactly the resolved subset.
func TestAdvertisedSubset(t *testing.T) {
	caps, err := capability.Resolve([]string{"CREATE_DELETE_VOLUME", "GET_CAPACITY"}, []string{"GET_VOLUME_STATS"}, false)
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, func(o *pcsi.Options) { o.Capabilities = caps })
	ctx := callCtx(t)
	ctrl, err := p.Controller.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	rpc := func(t csi.ControllerServiceCapability_RPC_Type) *csi.ControllerServiceCapability {
		return &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}}
	}
	want := &csi.ControllerGetCapabilitiesResponse{Capabilities: []*csi.ControllerServiceCapability{
		rpc(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME), rpc(csi.ControllerServiceCapability_RPC_GET_CAPACITY)}}
	if d := diff(want, ctrl); d != "" {
		t.Errorf("controller (-want +got):\n%s", d)
	}
	nodeCaps, err := p.Node.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wantNode := &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{{Type: &csi.NodeServiceCapability_Rpc{
		Rpc: &csi.NodeServiceCapability_RPC{Type: csi.NodeServiceCapability_RPC_GET_VOLUME_STATS}}}}}
	if d := diff(wantNode, nodeCaps); d != "" {
		t.Errorf("node (-want +got):\n%s", d)
	}
}

// TestAutoAdvertisesPublishReadonly: the proxy forwards
// ControllerPublishVolume's readonly flag unchanged
// (TestControllerPublishForwarded), so with proxy.controllerPublish auto
// passes on an upstream's PUBLISH_READONLY, and only then: not without
// controller publishing, not when no upstream has it. An explicit list may
// name it only with controller publishing on.
func TestAutoAdvertisesPublishReadonly(t *testing.T) {
	pub, readonly := csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME, csi.ControllerServiceCapability_RPC_PUBLISH_READONLY
	tests := []struct {
		name     string
		upstream []csi.ControllerServiceCapability_RPC_Type
		publish  bool
		want     []csi.ControllerServiceCapability_RPC_Type
	}{
		{"upstream honours readonly", []csi.ControllerServiceCapability_RPC_Type{pub, readonly}, true, []csi.ControllerServiceCapability_RPC_Type{pub, readonly}},
		{"upstream without it", []csi.ControllerServiceCapability_RPC_Type{pub}, true, []csi.ControllerServiceCapability_RPC_Type{pub}},
		{"controller publishing off", []csi.ControllerServiceCapability_RPC_Type{pub, readonly}, false, []csi.ControllerServiceCapability_RPC_Type{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeUpstream(t, withControllerCaps(tt.upstream...), withNodeCaps())
			p := startProxy(t, withPolicy(t, config.Capabilities{}, tt.publish))
			p.add(t, "a", conn{Endpoint: f.Endpoint})
			if _, unconfirmed := p.Driver.RefreshCapabilities(callCtx(t)); len(unconfirmed) != 0 {
				t.Fatalf("unconfirmed %v", unconfirmed)
			}
			if d := diff(tt.want, advertised(t, p).Controller); d != "" {
				t.Errorf("controller capabilities (-want +got):\n%s", d)
			}
		})
	}
	if _, err := capability.Resolve([]string{"PUBLISH_READONLY"}, nil, false); err == nil || !strings.Contains(err.Error(), "set proxy.controllerPublish: true") {
		t.Errorf("PUBLISH_READONLY without controllerPublish: %v, want an error naming proxy.controllerPublish", err)
	}
	if got, err := capability.Resolve([]string{"PUBLISH_READONLY"}, nil, true); err != nil || len(got.Controller) != 1 || got.Controller[0] != readonly {
		t.Errorf("PUBLISH_READONLY with controllerPublish: %v, %v", got.Controller, err)
	}
}
