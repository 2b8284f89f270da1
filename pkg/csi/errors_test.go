package csi_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/accessible"
)

// TestUpstreamErrorsPassThrough: an upstream status keeps its code and
// details; only the connection is added to the message.
func TestUpstreamErrorsPassThrough(t *testing.T) {
	for _, code := range []codes.Code{
		codes.NotFound, codes.AlreadyExists, codes.FailedPrecondition, codes.ResourceExhausted,
		codes.Aborted, codes.OutOfRange, codes.Internal, codes.InvalidArgument, codes.PermissionDenied,
	} {
		t.Run(code.String(), func(t *testing.T) {
			detail := &errdetails.ErrorInfo{Reason: "VOLUME_BUSY", Domain: "fake.upstream"}
			st, err := status.New(code, "volume is busy").WithDetails(detail)
			if err != nil {
				t.Fatal(err)
			}
			f := newFakeUpstream(t)
			f.setErr("DeleteVolume", st.Err())
			p := startProxy(t)
			p.add(t, "a", conn{Endpoint: f.Endpoint})
			_, err = p.Controller.DeleteVolume(callCtx(t), &csi.DeleteVolumeRequest{VolumeId: "v:a/vol-1"})
			got := status.Convert(err)
			if got.Code() != code || got.Message() != `connection "a": volume is busy` {
				t.Errorf("got %v %q, want %v %q", got.Code(), got.Message(), code, `connection "a": volume is busy`)
			}
			if d := diff([]any{detail}, got.Details()); d != "" {
				t.Errorf("details (-want +got):\n%s", d)
			}
		})
	}
}

// TestUpstreamUnimplemented: the proxy advertises every RPC it routes, so
// an upstream's UNIMPLEMENTED must not reach the CO as UNIMPLEMENTED.
func TestUpstreamUnimplemented(t *testing.T) {
	calls := append([]routedCall{
		{method: "CreateVolume", call: func(ctx context.Context, p *testProxy, _ string) error {
			_, err := p.Controller.CreateVolume(ctx, createReq("pvc-1", map[string]string{"connection": "a"}))
			return err
		}},
		{method: "GetCapacity", call: func(ctx context.Context, p *testProxy, _ string) error {
			_, err := p.Controller.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: map[string]string{"connection": "a"}})
			return err
		}},
	}, routedCalls...)
	for _, rc := range calls {
		t.Run(rc.method, func(t *testing.T) {
			f := newFakeUpstream(t)
			f.setUnimplemented(rc.method)
			p := startProxy(t)
			p.add(t, "a", conn{Endpoint: f.Endpoint})
			err := rc.call(callCtx(t), p, idOf(rc.method, "a", "h-1"))
			testkit.WantCode(t, err, codes.InvalidArgument, `connection "a" (driver csi) does not support `+rc.method)
		})
	}
}

// TestUpstreamLacksCapability: a call the upstream does not advertise is
// refused without calling it.
func TestUpstreamLacksCapability(t *testing.T) {
	ctrl := func(except csi.ControllerServiceCapability_RPC_Type) fakeOption {
		var caps []csi.ControllerServiceCapability_RPC_Type
		for _, c := range allControllerCaps {
			if c != except {
				caps = append(caps, c)
			}
		}
		return withControllerCaps(caps...)
	}
	node := func(except csi.NodeServiceCapability_RPC_Type) fakeOption {
		var caps []csi.NodeServiceCapability_RPC_Type
		for _, c := range allNodeCaps {
			if c != except {
				caps = append(caps, c)
			}
		}
		return withNodeCaps(caps...)
	}
	tests := []struct {
		method string
		opt    fakeOption
	}{
		{"DeleteVolume", ctrl(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME)},
		{"CreateSnapshot", ctrl(csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT)},
		{"DeleteSnapshot", ctrl(csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT)},
		{"ControllerGetVolume", ctrl(csi.ControllerServiceCapability_RPC_GET_VOLUME)},
		{"ControllerExpandVolume", ctrl(csi.ControllerServiceCapability_RPC_EXPAND_VOLUME)},
		{"NodeGetVolumeStats", node(csi.NodeServiceCapability_RPC_GET_VOLUME_STATS)},
		{"NodeExpandVolume", node(csi.NodeServiceCapability_RPC_EXPAND_VOLUME)},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			var rc routedCall
			for _, c := range routedCalls {
				if c.method == tt.method {
					rc = c
				}
			}
			f := newFakeUpstream(t, tt.opt)
			p := startProxy(t)
			p.add(t, "a", conn{Endpoint: f.Endpoint})
			err := rc.call(callCtx(t), p, idOf(tt.method, "a", "h-1"))
			testkit.WantCode(t, err, codes.InvalidArgument, `connection "a" (driver csi) does not support `+tt.method)
			if got := f.routed(); len(got) != 0 {
				t.Errorf("upstream received %v, want nothing", got)
			}
		})
	}
}

func TestGetCapacity(t *testing.T) {
	zone := testPrefix + "/zone"
	tests := []struct {
		name     string
		def      string
		opts     []fakeOption
		req      *csi.GetCapacityRequest
		want     int64
		wantUp   *csi.GetCapacityRequest // nil: no GetCapacity upstream
		noCalls  bool                    // not even capability discovery
		wantCode codes.Code
	}{
		{
			name: "forwarded",
			req: &csi.GetCapacityRequest{
				Parameters: map[string]string{"connection": "a", "fs": "sc"}, VolumeCapabilities: []*csi.VolumeCapability{testkit.RWO()},
				AccessibleTopology: topo(zone, "z1"),
			},
			want: 42,
			wantUp: &csi.GetCapacityRequest{
				Parameters: map[string]string{"fs": "sc", "pool": "conn-pool"}, VolumeCapabilities: []*csi.VolumeCapability{testkit.RWO()}},
		},
		{
			name: "default connection, no topology", def: "a", req: &csi.GetCapacityRequest{}, want: 42,
			wantUp: &csi.GetCapacityRequest{Parameters: map[string]string{"fs": "conn", "pool": "conn-pool"}},
		},
		{
			name: "upstream without GET_CAPACITY is unlimited",
			opts: []fakeOption{withControllerCaps(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME)},
			req:  &csi.GetCapacityRequest{Parameters: map[string]string{"connection": "a"}}, want: math.MaxInt64,
		},
		{
			name: "topology the connection does not serve",
			req:  &csi.GetCapacityRequest{Parameters: map[string]string{"connection": "a"}, AccessibleTopology: topo(zone, "z9")},
			want: 0, noCalls: true,
		},
		{
			name: "key of another prefix is not the zone",
			req: &csi.GetCapacityRequest{Parameters: map[string]string{"connection": "a"},
				AccessibleTopology: topo("other.example.com/zone", "z1", zone, "z9")},
			want: 0, noCalls: true,
		},
		// SPEC §6: the proxy cannot know which storage is meant; COs ask
		// so and expect an answer.
		{name: "no connection, no default", req: &csi.GetCapacityRequest{}, want: 0, noCalls: true},
		{name: "no connection, no default, a topology", req: &csi.GetCapacityRequest{AccessibleTopology: topo(zone, "z1")}, want: 0, noCalls: true},
		{name: "unknown connection", req: &csi.GetCapacityRequest{Parameters: map[string]string{"connection": "x"}}, wantCode: codes.FailedPrecondition},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeUpstream(t, tt.opts...)
			p := startProxy(t, withDefault(tt.def))
			p.add(t, "a", conn{
				Endpoint: f.Endpoint, Parameters: map[string]string{"fs": "conn", "pool": "conn-pool"},
				Topology: []accessible.Entry{{Requirements: map[string]string{"zone": "z1"}}},
			})
			resp, err := p.Controller.GetCapacity(callCtx(t), tt.req)
			if tt.wantCode != codes.OK {
				testkit.WantCode(t, err, tt.wantCode)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetAvailableCapacity() != tt.want {
				t.Errorf("available_capacity = %d, want %d", resp.GetAvailableCapacity(), tt.want)
			}
			var want []proto.Message
			if tt.wantUp != nil {
				want = append(want, tt.wantUp)
			}
			if d := diff(want, f.requests("GetCapacity")); d != "" {
				t.Errorf("upstream GetCapacity (-want +got):\n%s", d)
			}
			if tt.noCalls {
				if n := len(f.requests("ControllerGetCapabilities")); n != 0 {
					t.Errorf("upstream was asked for capabilities %d times, want 0", n)
				}
			}
		})
	}
}

// TestDeadUpstream: nothing listens on the endpoint; the caller learns
// which connection and endpoint, and other connections keep working.
func TestDeadUpstream(t *testing.T) {
	dead := "unix://" + filepath.Join(testkit.SocketDir(t), "nobody.sock")
	f := newFakeUpstream(t)
	p := startProxy(t)
	p.add(t, "dead", conn{Endpoint: dead})
	p.add(t, "live", conn{Endpoint: f.Endpoint})
	ctx := callCtx(t)
	for _, rc := range routedCalls {
		t.Run(rc.method, func(t *testing.T) {
			err := rc.call(ctx, p, idOf(rc.method, "dead", "h-1"))
			testkit.WantCode(t, err, codes.Unavailable, `connection "dead"`, dead)
			if err := rc.call(ctx, p, idOf(rc.method, "live", "h-1")); err != nil {
				t.Errorf("live connection: %v", err)
			}
		})
	}
}

// TestHungUpstream: csi.timeout caps every upstream call, capability
// discovery included, and a hung connection does not block another.
func TestHungUpstream(t *testing.T) {
	deleteVolume := func(ctx context.Context, p *testProxy, conn string) error {
		_, err := p.Controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "v:" + conn + "/vol-1"})
		return err
	}
	getCapacity := func(ctx context.Context, p *testProxy, conn string) error {
		_, err := p.Controller.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: map[string]string{"connection": conn}})
		return err
	}
	nodePublish := func(ctx context.Context, p *testProxy, conn string) error {
		_, err := p.Node.NodePublishVolume(ctx, publishReq("v:"+conn+"/vol-1"))
		return err
	}
	controllerPublish := func(ctx context.Context, p *testProxy, conn string) error {
		_, err := p.Controller.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{
			VolumeId: "v:" + conn + "/vol-1", NodeId: "node-1", VolumeCapability: testkit.RWO()})
		return err
	}
	tests := []struct {
		name string
		all  bool   // hang on every method
		wait string // the method in flight when the other connection is called
		call func(ctx context.Context, p *testProxy, conn string) error
	}{
		{name: "ControllerPublishVolume hangs", wait: "ControllerPublishVolume", call: controllerPublish},
		{name: "capabilities hang for ControllerPublishVolume", all: true, wait: "ControllerGetCapabilities", call: controllerPublish},
		{name: "DeleteVolume hangs", wait: "DeleteVolume", call: deleteVolume},
		{name: "GetCapacity hangs", wait: "GetCapacity", call: getCapacity},
		{name: "NodePublishVolume hangs", wait: "NodePublishVolume", call: nodePublish},
		{name: "controller capabilities hang", all: true, wait: "ControllerGetCapabilities", call: deleteVolume},
		{name: "capabilities hang for GetCapacity", all: true, wait: "ControllerGetCapabilities", call: getCapacity},
		{name: "node capabilities hang", all: true, wait: "NodeGetCapabilities", call: nodePublish},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			caps := withControllerCaps(append(allControllerCaps, csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME)...)
			opts := []fakeOption{caps}
			if tt.all {
				opts = append(opts, withDelayAll(time.Hour))
			}
			hung, fast := newFakeUpstream(t, opts...), newFakeUpstream(t, caps)
			if !tt.all {
				hung.setDelay(tt.wait, time.Hour)
			}
			p := startProxy(t, withControllerPublish)
			p.add(t, "hung", conn{Endpoint: hung.Endpoint, Timeout: "200ms"})
			p.add(t, "fast", conn{Endpoint: fast.Endpoint})
			ctx := callCtx(t)

			type result struct {
				err     error
				elapsed time.Duration
			}
			done := make(chan result, 1)
			start := time.Now()
			go func() {
				err := tt.call(ctx, p, "hung")
				done <- result{err, time.Since(start)}
			}()
			// While the hung call is in flight, another connection answers.
			hung.waitFor(t, tt.wait)
			if err := tt.call(ctx, p, "fast"); err != nil {
				t.Errorf("fast connection while another hangs: %v", err)
			}
			r := <-done
			testkit.WantCode(t, r.err, codes.DeadlineExceeded, `connection "hung"`, hung.Endpoint)
			if r.elapsed > 5*time.Second {
				t.Errorf("hung call took %v; csi.timeout is 200ms", r.elapsed)
			}
		})
	}
}

// TestHungUpstreamListing: a listing over a hung upstream ends after
// csi.timeout, naming the connection, instead of at the CO's deadline.
func TestHungUpstreamListing(t *testing.T) {
	hung := newFakeUpstream(t, withDelayAll(time.Hour),
		withControllerCaps(append(allControllerCaps, csi.ControllerServiceCapability_RPC_LIST_VOLUMES)...))
	p := startProxy(t)
	p.add(t, "hung", conn{Endpoint: hung.Endpoint, Timeout: "200ms"})
	start := time.Now()
	_, err := p.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{})
	testkit.WantCode(t, err, codes.DeadlineExceeded, `connection "hung"`, hung.Endpoint)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("listing took %v; csi.timeout is 200ms", d)
	}
}

// TestCallerDeadline: without csi.timeout the caller's deadline still
// ends a hung call.
func TestCallerDeadline(t *testing.T) {
	f := newFakeUpstream(t)
	f.setDelay("ControllerExpandVolume", time.Hour)
	p := startProxy(t)
	p.add(t, "a", conn{Endpoint: f.Endpoint})
	ctx, cancel := context.WithTimeout(callCtx(t), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := p.Controller.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{
		VolumeId: "v:a/vol-1", CapacityRange: &csi.CapacityRange{RequiredBytes: 1}})
	testkit.WantCode(t, err, codes.DeadlineExceeded)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v with a 300ms deadline", d)
	}
}
