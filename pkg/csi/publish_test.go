package csi_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
)

// iqnTemplate is an upstream that names nodes by iSCSI initiator.
const iqnTemplate = "iqn.2000-01.com.example:{nodeName}"

// publishCaps is an upstream with controller publishing.
var publishCaps = []csi.ControllerServiceCapability_RPC_Type{
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
	csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
	csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
}

// addWithNodeID writes a csi connection whose upstream expects node ids
// rendered by template (empty: the node name), with a connection secret.
func (p *testProxy) addWithNodeID(t *testing.T, name, endpoint, template string) {
	t.Helper()
	doc := fmt.Sprintf("driver: csi\ncsi:\n  endpoint: %s\n  secrets:\n    user: conn-user\n", endpoint)
	if template != "" {
		doc += fmt.Sprintf("proxy:\n  perDriver:\n    nodeId:\n      template: %q\n", template)
	}
	p.write(t, name, doc)
}

func publishRequest(volumeID, nodeID string) *csi.ControllerPublishVolumeRequest {
	return &csi.ControllerPublishVolumeRequest{
		VolumeId: volumeID, NodeId: nodeID, VolumeCapability: testkit.RWO(), Readonly: true,
		Secrets:       map[string]string{"password": "s3cr3t-req"},
		VolumeContext: map[string]string{"from": "upstream"},
	}
}

// TestControllerPublishAdvertised: PUBLISH_UNPUBLISH_VOLUME only with
// proxy.controllerPublish; without it the calls are not served.
func TestControllerPublishAdvertised(t *testing.T) {
	for _, enabled := range []bool{false, true} {
		t.Run(fmt.Sprintf("controllerPublish=%t", enabled), func(t *testing.T) {
			f := newFakeUpstream(t, withControllerCaps(publishCaps...))
			var opts []func(*pcsi.Options)
			if enabled {
				opts = append(opts, withControllerPublish)
			}
			p := startProxy(t, opts...)
			p.add(t, "a", conn{Endpoint: f.Endpoint})
			ctx := callCtx(t)
			caps, err := p.Controller.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			advertised := false
			for _, c := range caps.GetCapabilities() {
				advertised = advertised || c.GetRpc().GetType() == csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME
			}
			if advertised != enabled {
				t.Errorf("PUBLISH_UNPUBLISH_VOLUME advertised = %t, want %t", advertised, enabled)
			}
			_, perr := p.Controller.ControllerPublishVolume(ctx, publishRequest("v:a/vol-1", "node-1"))
			_, uerr := p.Controller.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: "v:a/vol-1", NodeId: "node-1"})
			if enabled {
				if perr != nil || uerr != nil {
					t.Fatalf("publish: %v; unpublish: %v", perr, uerr)
				}
				return
			}
			testkit.WantCode(t, perr, codes.Unimplemented, "proxy.controllerPublish")
			testkit.WantCode(t, uerr, codes.Unimplemented, "proxy.controllerPublish")
			if got := f.routed(); len(got) != 0 {
				t.Errorf("upstream received %v", got)
			}
		})
	}
}

// TestControllerPublishForwarded: node_id goes through the connection's
// template, the handle is unwrapped, secrets merged, the rest passed on,
// and publish_context comes back as the upstream gave it.
func TestControllerPublishForwarded(t *testing.T) {
	tests := []struct {
		template string
		node     string
		wantNode string
	}{
		{template: "", node: "node-1", wantNode: "node-1"},
		{template: "{nodeName}", node: "node-1", wantNode: "node-1"},
		{template: iqnTemplate, node: "node-1", wantNode: "iqn.2000-01.com.example:node-1"},
		{template: "{nodeName}.nodes.example.com", node: "worker-7", wantNode: "worker-7.nodes.example.com"},
	}
	for _, tt := range tests {
		t.Run(tt.template, func(t *testing.T) {
			f := newFakeUpstream(t, withControllerCaps(publishCaps...))
			p := startProxy(t, withControllerPublish)
			p.addWithNodeID(t, "a", f.Endpoint, tt.template)
			ctx := callCtx(t)
			merged := map[string]string{"password": "s3cr3t-req", "user": "conn-user"}

			resp, err := p.Controller.ControllerPublishVolume(ctx, publishRequest("v:a/pool/vol-1", tt.node))
			if err != nil {
				t.Fatal(err)
			}
			if d := diff(&csi.ControllerPublishVolumeResponse{PublishContext: map[string]string{"lun": "3"}}, resp); d != "" {
				t.Errorf("response (-want +got):\n%s", d)
			}
			want := publishRequest("pool/vol-1", tt.wantNode)
			want.Secrets = merged
			if d := diff(want, only[*csi.ControllerPublishVolumeRequest](t, f, "ControllerPublishVolume")); d != "" {
				t.Errorf("upstream ControllerPublishVolume (-want +got):\n%s", d)
			}

			if _, err := p.Controller.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{
				VolumeId: "v:a/pool/vol-1", NodeId: tt.node, Secrets: map[string]string{"password": "s3cr3t-req"}}); err != nil {
				t.Fatal(err)
			}
			if d := diff(&csi.ControllerUnpublishVolumeRequest{VolumeId: "pool/vol-1", NodeId: tt.wantNode, Secrets: merged},
				only[*csi.ControllerUnpublishVolumeRequest](t, f, "ControllerUnpublishVolume")); d != "" {
				t.Errorf("upstream ControllerUnpublishVolume (-want +got):\n%s", d)
			}
		})
	}
}

// TestControllerPublishNodeIDLimit: a rendered id over the CSI limit of
// 256 bytes is refused before the upstream sees it, naming the connection.
func TestControllerPublishNodeIDLimit(t *testing.T) {
	prefix := len(iqnTemplate) - len("{nodeName}")
	tests := []struct {
		name    string
		nodeLen int
		ok      bool
	}{
		{name: "256 bytes", nodeLen: pcsi.MaxNodeIDLength - prefix, ok: true},
		{name: "257 bytes", nodeLen: pcsi.MaxNodeIDLength - prefix + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeUpstream(t, withControllerCaps(publishCaps...))
			p := startProxy(t, withControllerPublish)
			p.addWithNodeID(t, "iscsi-a", f.Endpoint, iqnTemplate)
			node := strings.Repeat("n", tt.nodeLen)
			ctx := callCtx(t)
			_, perr := p.Controller.ControllerPublishVolume(ctx, publishRequest("v:iscsi-a/vol-1", node))
			_, uerr := p.Controller.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: "v:iscsi-a/vol-1", NodeId: node})
			if tt.ok {
				if perr != nil || uerr != nil {
					t.Fatalf("publish: %v; unpublish: %v", perr, uerr)
				}
				got := only[*csi.ControllerPublishVolumeRequest](t, f, "ControllerPublishVolume").GetNodeId()
				if len(got) != pcsi.MaxNodeIDLength {
					t.Errorf("upstream node id is %d bytes, want %d", len(got), pcsi.MaxNodeIDLength)
				}
				return
			}
			for _, err := range []error{perr, uerr} {
				testkit.WantCode(t, err, codes.InvalidArgument, `connection "iscsi-a"`, "257 bytes", "256", "proxy.perDriver.nodeId.template")
			}
			if got := f.routed(); len(got) != 0 {
				t.Errorf("upstream received %v", got)
			}
		})
	}
}

// TestControllerPublishUpstreamWithout: an upstream without controller
// publishing needs no attach step; both calls succeed without reaching it.
func TestControllerPublishUpstreamWithout(t *testing.T) {
	f := newFakeUpstream(t, withControllerCaps(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME))
	p := startProxy(t, withControllerPublish)
	p.addWithNodeID(t, "nfs", f.Endpoint, iqnTemplate)
	ctx := callCtx(t)
	resp, err := p.Controller.ControllerPublishVolume(ctx, publishRequest("v:nfs/share-1", "node-1"))
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(&csi.ControllerPublishVolumeResponse{}, resp); d != "" {
		t.Errorf("response (-want +got):\n%s", d)
	}
	if _, err := p.Controller.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: "v:nfs/share-1", NodeId: "node-1"}); err != nil {
		t.Fatal(err)
	}
	if got := f.routed(); len(got) != 0 {
		t.Errorf("upstream received %v", got)
	}
}

// TestControllerUnpublishEverywhere: an empty node_id means "from every
// node" and reaches the upstream empty, not rendered into a template.
func TestControllerUnpublishEverywhere(t *testing.T) {
	f := newFakeUpstream(t, withControllerCaps(publishCaps...))
	p := startProxy(t, withControllerPublish)
	p.addWithNodeID(t, "a", f.Endpoint, iqnTemplate)
	if _, err := p.Controller.ControllerUnpublishVolume(callCtx(t), &csi.ControllerUnpublishVolumeRequest{VolumeId: "v:a/vol-1"}); err != nil {
		t.Fatal(err)
	}
	if d := diff(&csi.ControllerUnpublishVolumeRequest{VolumeId: "vol-1", Secrets: map[string]string{"user": "conn-user"}},
		only[*csi.ControllerUnpublishVolumeRequest](t, f, "ControllerUnpublishVolume")); d != "" {
		t.Errorf("upstream ControllerUnpublishVolume (-want +got):\n%s", d)
	}
}

// TestControllerPublishValidation: IDs the proxy never made, missing
// connections and missing fields, per SPEC §5.
func TestControllerPublishValidation(t *testing.T) {
	publish := func(ctx context.Context, p *testProxy, req *csi.ControllerPublishVolumeRequest) error {
		_, err := p.Controller.ControllerPublishVolume(ctx, req)
		return err
	}
	unpublish := func(ctx context.Context, p *testProxy, id string) error {
		_, err := p.Controller.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "node-1"})
		return err
	}
	// Without a node id or a capability, a volume the proxy never made is
	// refused for the missing field; a routable one goes to the upstream
	// (forwarded_fields_test.go).
	noCap := publishRequest("garbage", "node-1")
	noCap.VolumeCapability = nil
	tests := []struct {
		name          string
		publish       *csi.ControllerPublishVolumeRequest
		unpublishID   string
		wantPublish   codes.Code
		wantUnpublish codes.Code
	}{
		{name: "malformed volume id", publish: publishRequest("garbage", "node-1"), unpublishID: "garbage",
			wantPublish: codes.NotFound, wantUnpublish: codes.OK},
		{name: "snapshot id", publish: publishRequest("s:a/snap-1", "node-1"), unpublishID: "s:a/snap-1",
			wantPublish: codes.NotFound, wantUnpublish: codes.OK},
		{name: "missing connection", publish: publishRequest("v:gone/vol-1", "node-1"), unpublishID: "v:gone/vol-1",
			wantPublish: codes.FailedPrecondition, wantUnpublish: codes.FailedPrecondition},
		{name: "empty volume id", publish: publishRequest("", "node-1"), unpublishID: "",
			wantPublish: codes.InvalidArgument, wantUnpublish: codes.InvalidArgument},
		{name: "empty node id", publish: publishRequest("garbage", ""), wantPublish: codes.InvalidArgument},
		{name: "no volume capability", publish: noCap, wantPublish: codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeUpstream(t, withControllerCaps(publishCaps...))
			p := startProxy(t, withControllerPublish)
			p.add(t, "a", conn{Endpoint: f.Endpoint})
			ctx := callCtx(t)
			testkit.WantCode(t, publish(ctx, p, tt.publish), tt.wantPublish)
			if tt.unpublishID != "" || tt.wantUnpublish != codes.OK {
				testkit.WantCode(t, unpublish(ctx, p, tt.unpublishID), tt.wantUnpublish)
			}
			if got := f.routed(); len(got) != 0 {
				t.Errorf("upstream received %v", got)
			}
		})
	}
}

// TestControllerPublishUpstreamError: the upstream's refusal reaches the CO
// with its code and the connection's name.
func TestControllerPublishUpstreamError(t *testing.T) {
	f := newFakeUpstream(t, withControllerCaps(publishCaps...))
	f.setErr("ControllerPublishVolume", status.Error(codes.FailedPrecondition, `volume vol-1 is already published to node "node-2"`))
	p := startProxy(t, withControllerPublish)
	p.add(t, "a", conn{Endpoint: f.Endpoint})
	_, err := p.Controller.ControllerPublishVolume(callCtx(t), publishRequest("v:a/vol-1", "node-1"))
	testkit.WantCode(t, err, codes.FailedPrecondition, `connection "a"`, "already published")
}
