package csi_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

// fieldCall is a routed call with its REQUIRED fields other than the ID
// left empty.
type fieldCall struct {
	method string
	call   func(ctx context.Context, p *testProxy, id string) error
}

// callsWithoutFields leave out every field but the one the proxy routes by.
var callsWithoutFields = []fieldCall{
	{"ValidateVolumeCapabilities", func(ctx context.Context, p *testProxy, id string) error {
		_, err := p.Controller.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id})
		return err
	}},
	{"ControllerExpandVolume", func(ctx context.Context, p *testProxy, id string) error {
		_, err := p.Controller.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id})
		return err
	}},
	{"ControllerModifyVolume", func(ctx context.Context, p *testProxy, id string) error {
		_, err := p.Controller.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: id})
		return err
	}},
	{"ControllerPublishVolume", func(ctx context.Context, p *testProxy, id string) error {
		_, err := p.Controller.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id})
		return err
	}},
	{"CreateSnapshot", func(ctx context.Context, p *testProxy, id string) error {
		_, err := p.Controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{SourceVolumeId: id})
		return err
	}},
	{"NodeStageVolume", func(ctx context.Context, p *testProxy, id string) error {
		_, err := p.Node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id})
		return err
	}},
	{"NodeUnstageVolume", func(ctx context.Context, p *testProxy, id string) error {
		_, err := p.Node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id})
		return err
	}},
	{"NodePublishVolume", func(ctx context.Context, p *testProxy, id string) error {
		_, err := p.Node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id})
		return err
	}},
	{"NodeUnpublishVolume", func(ctx context.Context, p *testProxy, id string) error {
		_, err := p.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id})
		return err
	}},
	{"NodeGetVolumeStats", func(ctx context.Context, p *testProxy, id string) error {
		_, err := p.Node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id})
		return err
	}},
	{"NodeExpandVolume", func(ctx context.Context, p *testProxy, id string) error {
		_, err := p.Node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id})
		return err
	}},
}

// fullUpstream advertises every capability these calls need upstream.
func fullUpstream(t *testing.T) *fakeUpstream {
	return newFakeUpstream(t, withControllerCaps(append(slices.Clone(allControllerCaps),
		csi.ControllerServiceCapability_RPC_MODIFY_VOLUME, csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME)...))
}

// TestForwardedCallsAddNoCheck: a call the proxy can route reaches the
// upstream whatever else it lacks, and the upstream's answer stands. An
// upstream that accepts the call (aws-ebs-csi-driver accepts an empty
// mutable_parameters map) gets it accepted; one that refuses it gets its
// own code and message back, with the connection named.
func TestForwardedCallsAddNoCheck(t *testing.T) {
	f := fullUpstream(t)
	// The fake has no ControllerModifyVolume of its own.
	f.setResponse("ControllerModifyVolume", &csi.ControllerModifyVolumeResponse{})
	p := startProxy(t, withControllerPublish)
	p.add(t, "a", conn{Endpoint: f.Endpoint})
	for _, fc := range callsWithoutFields {
		t.Run(fc.method+"/accepted", func(t *testing.T) {
			if err := fc.call(callCtx(t), p, "v:a/vol-1"); err != nil {
				t.Errorf("%s without its fields: %v, want the upstream's success", fc.method, err)
			}
			if got := f.requests(fc.method); len(got) == 0 {
				t.Errorf("%s never reached the upstream (routed: %v)", fc.method, f.routed())
			}
		})
		t.Run(fc.method+"/refused", func(t *testing.T) {
			f.setErr(fc.method, status.Error(codes.OutOfRange, "the upstream's own check"))
			defer f.setErr(fc.method, nil)
			err := fc.call(callCtx(t), p, "v:a/vol-1")
			testkit.WantCode(t, err, codes.OutOfRange, `connection "a": the upstream's own check`)
		})
	}
}

// TestForwardedModifyKeepsMutableParameters: mutable_parameters reach the
// upstream as the CO sent them (a VolumeAttributesClass may hold any key;
// only StorageClass parameters carry the proxy's "connection").
func TestForwardedModifyKeepsMutableParameters(t *testing.T) {
	f := fullUpstream(t)
	f.setResponse("ControllerModifyVolume", &csi.ControllerModifyVolumeResponse{})
	p := startProxy(t)
	p.add(t, "a", conn{Endpoint: f.Endpoint})
	params := map[string]string{"iops": "3000", "connection": "kept"}
	if _, err := p.Controller.ControllerModifyVolume(callCtx(t), &csi.ControllerModifyVolumeRequest{VolumeId: "v:a/vol-1", MutableParameters: params}); err != nil {
		t.Fatal(err)
	}
	got := only[*csi.ControllerModifyVolumeRequest](t, f, "ControllerModifyVolume")
	if d := diff(params, got.GetMutableParameters()); d != "" || got.GetVolumeId() != "vol-1" {
		t.Errorf("upstream got %v (-sent +received):\n%s", got, d)
	}
}

// TestSelfAnsweredCallsCheckFields: where the proxy answers itself, it
// checks the request as the CSI spec asks of a driver: an ID it never made
// loses to a missing REQUIRED field (INVALID_ARGUMENT naming it, the order
// csi-sanity expects), and so does staging or publishing it emulates for
// an upstream that has none.
func TestSelfAnsweredCallsCheckFields(t *testing.T) {
	wantField := map[string]string{
		"ValidateVolumeCapabilities": "volume_capabilities", "ControllerExpandVolume": "capacity_range",
		"ControllerPublishVolume": "node_id", "CreateSnapshot": "name", "NodeStageVolume": "staging_target_path",
		"NodeUnstageVolume": "staging_target_path", "NodePublishVolume": "target_path",
		"NodeUnpublishVolume": "target_path", "NodeGetVolumeStats": "volume_path", "NodeExpandVolume": "volume_path",
	}
	f := fullUpstream(t)
	p := startProxy(t, withControllerPublish)
	p.add(t, "a", conn{Endpoint: f.Endpoint})
	for _, fc := range callsWithoutFields {
		t.Run(fc.method, func(t *testing.T) {
			err := fc.call(callCtx(t), p, "never-made-by-the-proxy")
			field, ok := wantField[fc.method]
			if !ok { // ControllerModifyVolume: an empty map is a valid request
				testkit.WantCode(t, err, codes.NotFound)
				return
			}
			testkit.WantCode(t, err, codes.InvalidArgument, field+" is required")
		})
	}
	if r := f.routed(); len(r) != 0 {
		t.Errorf("calls for an ID the proxy never made reached the upstream: %v", r)
	}

	t.Run("emulated staging", func(t *testing.T) {
		f := newFakeUpstream(t, withNodeCaps(csi.NodeServiceCapability_RPC_GET_VOLUME_STATS))
		p := startProxy(t)
		p.add(t, "a", conn{Endpoint: f.Endpoint})
		_, err := p.Node.NodeStageVolume(callCtx(t), &csi.NodeStageVolumeRequest{VolumeId: "v:a/vol-1", StagingTargetPath: "/mnt/s"})
		testkit.WantCode(t, err, codes.InvalidArgument, "volume_capability is required")
		_, err = p.Node.NodeUnstageVolume(callCtx(t), &csi.NodeUnstageVolumeRequest{VolumeId: "v:a/vol-1"})
		testkit.WantCode(t, err, codes.InvalidArgument, "staging_target_path is required")
		if _, err := p.Node.NodeStageVolume(callCtx(t), &csi.NodeStageVolumeRequest{VolumeId: "v:a/vol-1", StagingTargetPath: "/mnt/s", VolumeCapability: testkit.RWO()}); err != nil {
			t.Errorf("a complete emulated stage: %v", err)
		}
		if r := f.routed(); len(r) != 0 {
			t.Errorf("emulated staging reached the upstream: %v", r)
		}
	})
	t.Run("publish an upstream does not need", func(t *testing.T) {
		f := newFakeUpstream(t) // no PUBLISH_UNPUBLISH_VOLUME
		p := startProxy(t, withControllerPublish)
		p.add(t, "a", conn{Endpoint: f.Endpoint})
		_, err := p.Controller.ControllerPublishVolume(callCtx(t), &csi.ControllerPublishVolumeRequest{VolumeId: "v:a/vol-1", NodeId: "n1"})
		testkit.WantCode(t, err, codes.InvalidArgument, "volume_capability is required")
		if _, err := p.Controller.ControllerPublishVolume(callCtx(t), &csi.ControllerPublishVolumeRequest{VolumeId: "v:a/vol-1", NodeId: "n1", VolumeCapability: testkit.RWO()}); err != nil {
			t.Errorf("a complete publish the upstream does not need: %v", err)
		}
	})
}

// TestNonASCIINamesStayReadable: names come back as the user wrote them.
// A StorageClass naming a connection "zöne" is told about 'ö'; a volume
// name or handle in UTF-8 reaches the upstream untouched, and the
// upstream's message about it comes back readable (no \xc3 escapes, no
// mojibake), in the error and in the log line.
func TestNonASCIINamesStayReadable(t *testing.T) {
	f := newFakeUpstream(t)
	f.setErr("CreateVolume", status.Error(codes.AlreadyExists, `volume "données-été" exists with another capacity`))
	p := startProxy(t)
	p.add(t, "a", conn{Endpoint: f.Endpoint})
	garbled := []string{`\x`, `\u00`, "Ã", "�"}
	readable := func(t *testing.T, err error, want ...string) {
		t.Helper()
		msg := status.Convert(err).Message()
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Errorf("message %q does not contain %q", msg, w)
			}
		}
		for _, g := range garbled {
			if strings.Contains(msg, g) {
				t.Errorf("message %q is garbled (%q)", msg, g)
			}
		}
	}

	_, err := p.Controller.CreateVolume(callCtx(t), createReq("pvc-1", map[string]string{"connection": "zöne"}))
	testkit.WantCode(t, err, codes.InvalidArgument)
	readable(t, err, `"zöne"`, `'ö'`)

	_, err = p.Controller.CreateVolume(callCtx(t), createReq("données-été", map[string]string{"connection": "a"}))
	testkit.WantCode(t, err, codes.AlreadyExists)
	readable(t, err, `connection "a"`, `volume "données-été" exists`)
	if got := only[*csi.CreateVolumeRequest](t, f, "CreateVolume").GetName(); got != "données-été" {
		t.Errorf("upstream got name %q, want données-été", got)
	}

	_, err = p.Controller.ControllerGetVolume(callCtx(t), &csi.ControllerGetVolumeRequest{VolumeId: "v:zöne/vol-1"})
	testkit.WantCode(t, err, codes.NotFound)
	readable(t, err, `"v:zöne/vol-1"`, `'ö'`)

	if _, err := p.Controller.ControllerExpandVolume(callCtx(t), &csi.ControllerExpandVolumeRequest{
		VolumeId: "v:a/données", CapacityRange: &csi.CapacityRange{RequiredBytes: 1}}); err != nil {
		t.Fatal(err)
	}
	if got := only[*csi.ControllerExpandVolumeRequest](t, f, "ControllerExpandVolume").GetVolumeId(); got != "données" {
		t.Errorf("upstream got handle %q, want données", got)
	}
	if logs := p.Logs.String(); !strings.Contains(logs, "données-été") || !strings.Contains(logs, "zöne") {
		t.Errorf("the log does not carry the names as written:\n%s", logs)
	}
}

// TestValidateConfirmsWhatTheUpstreamConfirmed: confirmed.parameters holds
// the CO's parameters that the upstream confirmed, plus the connection
// parameter when it names the volume's connection; never a parameter the
// upstream left out, which the CO would read as validated.
func TestValidateConfirmsWhatTheUpstreamConfirmed(t *testing.T) {
	f := newFakeUpstream(t)
	f.setResponse("ValidateVolumeCapabilities", &csi.ValidateVolumeCapabilitiesResponse{
		Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
			VolumeCapabilities: []*csi.VolumeCapability{testkit.RWO()},
			Parameters:         map[string]string{"fs": "sc", "pool": "conn-default", "tier": "other"},
		}})
	p := startProxy(t)
	p.add(t, "a", conn{Endpoint: f.Endpoint, Parameters: map[string]string{"pool": "conn-default"}})
	for _, tc := range []struct {
		name       string
		sent, want map[string]string
	}{
		{"confirmed subset", map[string]string{"connection": "a", "fs": "sc", "tier": "gold", "new": "x"},
			map[string]string{"connection": "a", "fs": "sc"}},
		{"another connection's name", map[string]string{"connection": "b", "fs": "sc"}, map[string]string{"fs": "sc"}},
		{"nothing sent", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := p.Controller.ValidateVolumeCapabilities(callCtx(t), &csi.ValidateVolumeCapabilitiesRequest{
				VolumeId: "v:a/vol-1", VolumeCapabilities: []*csi.VolumeCapability{testkit.RWO()}, Parameters: tc.sent})
			if err != nil {
				t.Fatal(err)
			}
			if d := diff(tc.want, resp.GetConfirmed().GetParameters()); d != "" {
				t.Errorf("confirmed.parameters (-want +got):\n%s", d)
			}
		})
	}
}
