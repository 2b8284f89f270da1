package csi_test

import (
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/accessible"
)

func createReq(name string, params map[string]string) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{
		Name:               name,
		CapacityRange:      &csi.CapacityRange{RequiredBytes: 1 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{testkit.RWO()},
		Parameters:         params,
	}
}

func TestCreateVolumeResolvesConnection(t *testing.T) {
	tests := []struct {
		name     string
		def      string
		req      *csi.CreateVolumeRequest
		wantCode codes.Code
		wantMsg  []string
		wantOn   string // which fake received the CreateVolume
	}{
		{name: "from parameters", req: createReq("pvc-1", map[string]string{"connection": "a"}), wantOn: "a"},
		{name: "from defaultConnection", def: "b", req: createReq("pvc-1", nil), wantOn: "b"},
		{name: "parameter beats default", def: "b", req: createReq("pvc-1", map[string]string{"connection": "a"}), wantOn: "a"},
		{name: "empty parameter falls back to default", def: "b", req: createReq("pvc-1", map[string]string{"connection": ""}), wantOn: "b"},
		{
			name: "missing", req: createReq("pvc-1", map[string]string{"other": "x"}),
			wantCode: codes.InvalidArgument, wantMsg: []string{"parameters.connection"},
		},
		{
			name: "unknown connection", req: createReq("pvc-1", map[string]string{"connection": "nope"}),
			wantCode: codes.FailedPrecondition, wantMsg: []string{`"nope"`, "nope.yaml"},
		},
		{
			name: "unknown default connection", def: "gone", req: createReq("pvc-1", nil),
			wantCode: codes.FailedPrecondition, wantMsg: []string{`"gone"`, "gone.yaml"},
		},
		{
			name: "connection name with a slash", req: createReq("pvc-1", map[string]string{"connection": "../a"}),
			wantCode: codes.InvalidArgument, wantMsg: []string{"invalid connection name"},
		},
		{
			name: "connection name too long", req: createReq("pvc-1", map[string]string{"connection": strings.Repeat("a", 64)}),
			wantCode: codes.InvalidArgument, wantMsg: []string{"64 bytes"},
		},
		{
			name: "broken connection file", req: createReq("pvc-1", map[string]string{"connection": "broken"}),
			wantCode: codes.FailedPrecondition, wantMsg: []string{`"broken"`, "csi.endpoint"},
		},
		// name and volume_capabilities are the upstream's to judge; the
		// proxy needs neither, so routing comes first and decides alone.
		{name: "no name: the upstream judges it", req: createReq("", map[string]string{"connection": "a"}), wantOn: "a"},
		{
			name: "no capabilities: the upstream judges it", req: &csi.CreateVolumeRequest{Name: "pvc-1", Parameters: map[string]string{"connection": "a"}},
			wantOn: "a",
		},
		{
			name: "nothing but the connection", req: &csi.CreateVolumeRequest{Parameters: map[string]string{"connection": "b"}},
			wantOn: "b",
		},
		{
			name: "no name, no connection: routing fails first", req: &csi.CreateVolumeRequest{Parameters: map[string]string{"other": "x"}},
			wantCode: codes.InvalidArgument, wantMsg: []string{"parameters.connection"},
		},
		{
			name: "no name, unknown connection: routing fails first", req: &csi.CreateVolumeRequest{Parameters: map[string]string{"connection": "nope"}},
			wantCode: codes.FailedPrecondition, wantMsg: []string{`"nope"`, "nope.yaml"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fakes := map[string]*fakeUpstream{"a": newFakeUpstream(t), "b": newFakeUpstream(t)}
			p := startProxy(t, withDefault(tt.def))
			for name, f := range fakes {
				p.add(t, name, conn{Endpoint: f.Endpoint})
			}
			p.write(t, "broken", "driver: csi\n")

			resp, err := p.Controller.CreateVolume(callCtx(t), tt.req)
			if tt.wantCode != codes.OK {
				testkit.WantCode(t, err, tt.wantCode, tt.wantMsg...)
				for name, f := range fakes {
					if got := f.routed(); len(got) != 0 {
						t.Errorf("fake %s received %v, want nothing", name, got)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := "v:" + tt.wantOn + "/vol-" + tt.req.GetName(); resp.GetVolume().GetVolumeId() != want {
				t.Errorf("volume_id = %q, want %q", resp.GetVolume().GetVolumeId(), want)
			}
			for name, f := range fakes {
				want := 0
				if name == tt.wantOn {
					want = 1
				}
				if got := len(f.requests("CreateVolume")); got != want {
					t.Errorf("fake %s received %d CreateVolume, want %d", name, got, want)
				}
			}
		})
	}
}

// TestCreateVolumeUpstreamJudgesFields: a CreateVolume without name or
// volume_capabilities reaches the upstream as sent, and the upstream's
// refusal comes back with its own code and message, the connection named
// (docs/conformance.md: the proxy adds no check the upstream does not
// make).
func TestCreateVolumeUpstreamJudgesFields(t *testing.T) {
	f := newFakeUpstream(t)
	f.setErr("CreateVolume", status.Error(codes.InvalidArgument, "the upstream's own check: name missing"))
	p := startProxy(t)
	p.add(t, "a", conn{Endpoint: f.Endpoint})
	_, err := p.Controller.CreateVolume(callCtx(t), &csi.CreateVolumeRequest{Parameters: map[string]string{"connection": "a"}})
	testkit.WantCode(t, err, codes.InvalidArgument, `connection "a": the upstream's own check: name missing`)
	reqs := f.requests("CreateVolume")
	if len(reqs) != 1 {
		t.Fatalf("upstream received %d CreateVolume, want 1", len(reqs))
	}
	if got := reqs[0].(*csi.CreateVolumeRequest); got.GetName() != "" || len(got.GetVolumeCapabilities()) != 0 {
		t.Errorf("upstream received name %q and %d capabilities, want them empty as sent", got.GetName(), len(got.GetVolumeCapabilities()))
	}
}

// TestCreateVolumeForwarded checks exactly what reaches the upstream, what
// comes back, and that the inbound request object is left alone.
func TestCreateVolumeForwarded(t *testing.T) {
	f := newFakeUpstream(t)
	p := startProxy(t)
	entries := []accessible.Entry{
		{Requirements: map[string]string{"zone": "z1"}, Extra: map[string]string{"custom.prefix/custom.name": "custom.value"}},
		{Requirements: map[string]string{"zone": "z2"}},
	}
	p.add(t, "a", conn{
		Endpoint:   f.Endpoint,
		Parameters: map[string]string{"fs": "conn", "pool": "conn-pool"},
		Secrets:    map[string]string{"user": "conn-user", "password": "s3cr3t-conn"},
		Topology:   entries,
	})
	req := &csi.CreateVolumeRequest{
		Name:               "pvc-1",
		CapacityRange:      &csi.CapacityRange{RequiredBytes: 5 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{testkit.RWO()},
		Parameters:         map[string]string{"connection": "a", "fs": "sc", "extra": "sc"},
		MutableParameters:  map[string]string{"iops": "100"},
		Secrets:            map[string]string{"password": "s3cr3t-req"},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: "s:a/snap-9"}}},
		AccessibilityRequirements: &csi.TopologyRequirement{
			Requisite: []*csi.Topology{topo(testPrefix+"/zone", "z2")},
			Preferred: []*csi.Topology{topo(testPrefix+"/zone", "z2")},
		},
	}
	before := proto.Clone(req)

	// Called in-process: over gRPC the server decodes its own copy, and it
	// is that copy a proxy must not edit.
	resp, err := p.Driver.CreateVolume(callCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(before, req); d != "" {
		t.Errorf("inbound request was mutated (-before +after):\n%s", d)
	}

	wantUp := &csi.CreateVolumeRequest{
		Name:               "pvc-1",
		CapacityRange:      &csi.CapacityRange{RequiredBytes: 5 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{testkit.RWO()},
		Parameters:         map[string]string{"fs": "sc", "pool": "conn-pool", "extra": "sc"},
		MutableParameters:  map[string]string{"iops": "100"},
		Secrets:            map[string]string{"user": "conn-user", "password": "s3cr3t-req"},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: "snap-9"}}},
	}
	if d := diff(wantUp, only[*csi.CreateVolumeRequest](t, f, "CreateVolume")); d != "" {
		t.Errorf("upstream request (-want +got):\n%s", d)
	}

	wantResp := &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:           "v:a/vol-pvc-1",
		CapacityBytes:      5 << 20,
		VolumeContext:      map[string]string{"from": "upstream"},
		ContentSource:      before.(*csi.CreateVolumeRequest).GetVolumeContentSource(),
		AccessibleTopology: []*csi.Topology{topo(testPrefix+"/zone", "z2")},
	}}
	if d := diff(wantResp, resp); d != "" {
		t.Errorf("response (-want +got):\n%s", d)
	}
}

func TestCreateVolumeAccessibleTopology(t *testing.T) {
	zone := testPrefix + "/zone"
	region := testPrefix + "/region"
	twoZones := []accessible.Entry{
		{Requirements: map[string]string{"region": "r1", "zone": "z1"}, Extra: map[string]string{"custom.prefix/custom.name": "custom.value"}},
		{Requirements: map[string]string{"region": "r1", "zone": "z2"}},
	}
	z1 := topo(region, "r1", zone, "z1", "custom.prefix/custom.name", "custom.value")
	z2 := topo(region, "r1", zone, "z2")
	tests := []struct {
		name     string
		entries  []accessible.Entry
		req      *csi.TopologyRequirement
		want     []*csi.Topology
		wantCode codes.Code
		wantMsg  []string
	}{
		{name: "no requirements: whole list", entries: twoZones, want: []*csi.Topology{z1, z2}},
		{name: "requisite picks one entry", entries: twoZones, req: &csi.TopologyRequirement{
			Requisite: []*csi.Topology{topo(zone, "z2")}}, want: []*csi.Topology{z2}},
		{name: "one of several requisite terms is enough", entries: twoZones, req: &csi.TopologyRequirement{
			Requisite: []*csi.Topology{topo(zone, "z9"), topo(zone, "z1")}}, want: []*csi.Topology{z1}},
		{name: "preferred orders the result", entries: twoZones, req: &csi.TopologyRequirement{
			Requisite: []*csi.Topology{topo(zone, "z1"), topo(zone, "z2")},
			Preferred: []*csi.Topology{topo(zone, "z2"), topo(zone, "z1")}}, want: []*csi.Topology{z2, z1}},
		{name: "verbatim keys stay verbatim",
			entries: []accessible.Entry{{Requirements: map[string]string{"topology.kubernetes.io/zone": "eu-1a"}}},
			req:     &csi.TopologyRequirement{Requisite: []*csi.Topology{topo("topology.kubernetes.io/zone", "eu-1a")}},
			want:    []*csi.Topology{topo("topology.kubernetes.io/zone", "eu-1a")}},
		// Storage reachable everywhere, but never wider than the terms
		// (SPEC §8): a class's allowedTopologies still bounds the PV.
		{name: "no topology list: narrowed to the terms", req: &csi.TopologyRequirement{
			Requisite: []*csi.Topology{topo(zone, "z1")}},
			want: []*csi.Topology{topo(zone, "z1")}},
		{name: "no topology list, no requirements: reachable everywhere"},
		{name: "mismatch", entries: twoZones, req: &csi.TopologyRequirement{
			Requisite: []*csi.Topology{topo(zone, "z3")}},
			wantCode: codes.ResourceExhausted, wantMsg: []string{`connection "a"`, "z3", "not accessible"}},
		{name: "same short key under another prefix does not match", entries: twoZones, req: &csi.TopologyRequirement{
			Requisite: []*csi.Topology{topo("other.example.com/zone", "z1", zone, "z3")}},
			wantCode: codes.ResourceExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeUpstream(t)
			p := startProxy(t)
			p.add(t, "a", conn{Endpoint: f.Endpoint, Topology: tt.entries})
			req := createReq("pvc-1", map[string]string{"connection": "a"})
			req.AccessibilityRequirements = tt.req
			resp, err := p.Controller.CreateVolume(callCtx(t), req)
			if tt.wantCode != codes.OK {
				testkit.WantCode(t, err, tt.wantCode, tt.wantMsg...)
				if got := f.routed(); len(got) != 0 {
					t.Errorf("upstream received %v, want nothing", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := diff(tt.want, resp.GetVolume().GetAccessibleTopology()); d != "" {
				t.Errorf("accessible_topology (-want +got):\n%s", d)
			}
			if up := only[*csi.CreateVolumeRequest](t, f, "CreateVolume"); up.AccessibilityRequirements != nil {
				t.Errorf("upstream received accessibility_requirements %v", up.AccessibilityRequirements)
			}
		})
	}
}

func TestCreateVolumeUpstreamIDs(t *testing.T) {
	long := strings.Repeat("x", 125) // "v:a/" + 125 = 129 bytes
	fits := strings.Repeat("y", 124) // exactly 128 bytes
	tests := []struct {
		name       string
		resp       *csi.CreateVolumeResponse
		deleteErr  error
		wantID     string
		wantCode   codes.Code
		wantMsg    []string
		wantDelete string // handle the proxy must delete upstream
		noLimit    bool   // proxy.maxIdLength unset (the rest set it to 128)
	}{
		{name: "exactly 128 bytes", resp: &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: fits}}, wantID: "v:a/" + fits},
		{name: "129 bytes without proxy.maxIdLength", resp: &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: long}}, noLimit: true, wantID: "v:a/" + long},
		{
			name: "too long is rolled back", resp: &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: long}},
			wantCode: codes.InvalidArgument, wantDelete: long,
			wantMsg: []string{"129 bytes", "over proxy.maxIdLength 128", `connection name "a" is 1 bytes`, "upstream handle is 125 bytes", "was deleted"},
		},
		{
			name: "too long and the rollback fails", resp: &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: long}},
			deleteErr: status.Error(codes.Unavailable, "storage offline"),
			wantCode:  codes.Internal, wantDelete: long,
			wantMsg: []string{"129 bytes", "deleting the upstream object also failed", "storage offline"},
		},
		{
			name: "empty id", resp: &csi.CreateVolumeResponse{Volume: &csi.Volume{CapacityBytes: 1}},
			wantCode: codes.Internal, wantMsg: []string{`connection "a"`, "no volume id"},
		},
		{
			name: "no volume", resp: &csi.CreateVolumeResponse{},
			wantCode: codes.Internal, wantMsg: []string{`connection "a"`, "no volume id"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeUpstream(t)
			f.setResponse("CreateVolume", tt.resp)
			if tt.deleteErr != nil {
				f.setErr("DeleteVolume", tt.deleteErr)
			}
			limit := withMaxIDLength(128)
			if tt.noLimit {
				limit = withMaxIDLength(0)
			}
			p := startProxy(t, limit)
			p.add(t, "a", conn{Endpoint: f.Endpoint, Secrets: map[string]string{"token": "s3cr3t-conn"}})
			req := createReq("pvc-1", map[string]string{"connection": "a"})
			req.Secrets = map[string]string{"user": "admin"}
			resp, err := p.Controller.CreateVolume(callCtx(t), req)
			if tt.wantCode != codes.OK {
				testkit.WantCode(t, err, tt.wantCode, tt.wantMsg...)
			} else if err != nil {
				t.Fatal(err)
			} else if resp.GetVolume().GetVolumeId() != tt.wantID {
				t.Errorf("volume_id = %q, want %q", resp.GetVolume().GetVolumeId(), tt.wantID)
			}
			if tt.wantDelete == "" {
				if got := f.requests("DeleteVolume"); len(got) != 0 {
					t.Errorf("upstream received DeleteVolume %v, want none", got)
				}
				return
			}
			want := &csi.DeleteVolumeRequest{VolumeId: tt.wantDelete, Secrets: map[string]string{"token": "s3cr3t-conn", "user": "admin"}}
			if d := diff(want, only[*csi.DeleteVolumeRequest](t, f, "DeleteVolume")); d != "" {
				t.Errorf("rollback DeleteVolume (-want +got):\n%s", d)
			}
		})
	}
}

func TestCreateVolumeContentSource(t *testing.T) {
	snap := func(id string) *csi.VolumeContentSource {
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: id}}}
	}
	vol := func(id string) *csi.VolumeContentSource {
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}}
	}
	tests := []struct {
		name     string
		src      *csi.VolumeContentSource
		wantUp   *csi.VolumeContentSource
		wantCode codes.Code
		wantMsg  []string
	}{
		{name: "restore", src: snap("s:a/snap-1"), wantUp: snap("snap-1")},
		{name: "clone", src: vol("v:a/vol-1"), wantUp: vol("vol-1")},
		{name: "handle with slashes", src: vol("v:a/pool/vol-1"), wantUp: vol("pool/vol-1")},
		{
			name: "restore across connections", src: snap("s:b/snap-1"),
			wantCode: codes.InvalidArgument, wantMsg: []string{`connection "b"`, `connection "a"`},
		},
		{
			name: "clone across connections", src: vol("v:b/vol-1"),
			wantCode: codes.InvalidArgument, wantMsg: []string{`connection "b"`, `connection "a"`},
		},
		{name: "snapshot id not made by the proxy", src: snap("snap-1"), wantCode: codes.NotFound, wantMsg: []string{"snapshot_id"}},
		{name: "volume id given as snapshot", src: snap("v:a/vol-1"), wantCode: codes.NotFound},
		{name: "empty snapshot id", src: snap(""), wantCode: codes.InvalidArgument},
		{name: "neither snapshot nor volume", src: &csi.VolumeContentSource{}, wantCode: codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fa, fb := newFakeUpstream(t), newFakeUpstream(t)
			p := startProxy(t)
			p.add(t, "a", conn{Endpoint: fa.Endpoint})
			p.add(t, "b", conn{Endpoint: fb.Endpoint})
			req := createReq("pvc-1", map[string]string{"connection": "a"})
			req.VolumeContentSource = tt.src
			resp, err := p.Controller.CreateVolume(callCtx(t), req)
			if tt.wantCode != codes.OK {
				testkit.WantCode(t, err, tt.wantCode, tt.wantMsg...)
				if got := append(fa.routed(), fb.routed()...); len(got) != 0 {
					t.Errorf("upstreams received %v, want nothing", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := diff(tt.wantUp, only[*csi.CreateVolumeRequest](t, fa, "CreateVolume").GetVolumeContentSource()); d != "" {
				t.Errorf("upstream content source (-want +got):\n%s", d)
			}
			if d := diff(tt.src, resp.GetVolume().GetContentSource()); d != "" {
				t.Errorf("response content source (-want +got):\n%s", d)
			}
		})
	}
}

// TestCreateVolumeWithoutCapability: CreateVolume to an upstream without
// CREATE_DELETE_VOLUME is refused without a call.
func TestCreateVolumeWithoutCapability(t *testing.T) {
	f := newFakeUpstream(t, withControllerCaps(csi.ControllerServiceCapability_RPC_GET_CAPACITY))
	p := startProxy(t)
	p.add(t, "a", conn{Endpoint: f.Endpoint})
	_, err := p.Controller.CreateVolume(callCtx(t), createReq("pvc-1", map[string]string{"connection": "a"}))
	testkit.WantCode(t, err, codes.InvalidArgument, `connection "a" (driver csi) does not support CreateVolume`)
	if got := f.routed(); len(got) != 0 {
		t.Errorf("upstream received %v, want nothing", got)
	}
}

// TestSecretNamedConnection: only the connection *parameter* is the
// proxy's; a secret of that name belongs to the upstream.
func TestSecretNamedConnection(t *testing.T) {
	f := newFakeUpstream(t)
	p := startProxy(t)
	p.add(t, "a", conn{Endpoint: f.Endpoint, Secrets: map[string]string{"connection": "s3cr3t-dsn-default"}})
	ctx := callCtx(t)
	req := createReq("pvc-1", map[string]string{"connection": "a"})
	req.Secrets = map[string]string{"connection": "s3cr3t-dsn"}
	if _, err := p.Controller.CreateVolume(ctx, req); err != nil {
		t.Fatal(err)
	}
	up := only[*csi.CreateVolumeRequest](t, f, "CreateVolume")
	if d := diff(map[string]string{"connection": "s3cr3t-dsn"}, up.GetSecrets()); d != "" {
		t.Errorf("CreateVolume secrets (-want +got):\n%s", d)
	}
	if up.GetParameters() != nil {
		t.Errorf("CreateVolume parameters = %v, want none", up.GetParameters())
	}
	if _, err := p.Node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
		VolumeId: "v:a/vol-1", TargetPath: "/t", VolumeCapability: testkit.RWO()}); err != nil {
		t.Fatal(err)
	}
	if d := diff(map[string]string{"connection": "s3cr3t-dsn-default"},
		only[*csi.NodePublishVolumeRequest](t, f, "NodePublishVolume").GetSecrets()); d != "" {
		t.Errorf("NodePublishVolume secrets (-want +got):\n%s", d)
	}
}
