package csi_test

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

// fakeUpstream is a CSI driver served over a real unix socket. It records
// every request it receives (a clone, so later edits by anyone cannot
// change what the test sees) and lets a test choose capabilities, canned
// responses, errors, delays and unimplemented methods per method name
// ("CreateVolume", "NodeGetCapabilities", …).
type fakeUpstream struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	// Endpoint is what a connection file's csi.endpoint names.
	Endpoint string
	path     string
	srv      *grpc.Server
	// wrapListener, if set, wraps the fake's listener (to watch its
	// connections).
	wrapListener func(net.Listener) net.Listener

	mu             sync.Mutex
	calls          []fakeCall
	controllerCaps []csi.ControllerServiceCapability_RPC_Type
	nodeCaps       []csi.NodeServiceCapability_RPC_Type
	errs           map[string]error
	delays         map[string]time.Duration
	responses      map[string]proto.Message
	unimplemented  map[string]bool
	received       chan string

	// listVolumes and listSnapshots are what ListVolumes and ListSnapshots
	// serve, in pages of at most pageSize entries (0: as many as asked),
	// with tokens "up-<index>" that any other value fails with ABORTED.
	listVolumes   []*csi.ListVolumesResponse_Entry
	listSnapshots []*csi.Snapshot
	pageSize      int
}

// fakeCall is one request the fake received.
type fakeCall struct {
	Method string
	Req    proto.Message
}

// allControllerCaps is what a full-featured upstream advertises.
var allControllerCaps = []csi.ControllerServiceCapability_RPC_Type{
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
	csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
	csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
	csi.ControllerServiceCapability_RPC_GET_CAPACITY,
	csi.ControllerServiceCapability_RPC_GET_VOLUME,
}

// allNodeCaps is what a full-featured node upstream advertises.
var allNodeCaps = []csi.NodeServiceCapability_RPC_Type{
	csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
	csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
	csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
}

// fakeOption configures a fake before it starts serving; capabilities must
// be set here because the proxy caches them on first use.
type fakeOption func(*fakeUpstream)

func withControllerCaps(caps ...csi.ControllerServiceCapability_RPC_Type) fakeOption {
	return func(f *fakeUpstream) { f.controllerCaps = caps }
}

func withNodeCaps(caps ...csi.NodeServiceCapability_RPC_Type) fakeOption {
	return func(f *fakeUpstream) { f.nodeCaps = caps }
}

// withDelayAll makes every method (including capability discovery) hang for d
// or until the call is cancelled: a hung storage system.
func withDelayAll(d time.Duration) fakeOption {
	return func(f *fakeUpstream) { f.delays["*"] = d }
}

// newFakeUpstream starts a fake on a unix socket and stops it when the test
// ends.
func newFakeUpstream(t *testing.T, opts ...fakeOption) *fakeUpstream {
	t.Helper()
	path := filepath.Join(testkit.SocketDir(t), "up.sock")
	f := &fakeUpstream{
		Endpoint:       "unix://" + path,
		path:           path,
		controllerCaps: allControllerCaps,
		nodeCaps:       allNodeCaps,
		errs:           map[string]error{},
		delays:         map[string]time.Duration{},
		responses:      map[string]proto.Message{},
		unimplemented:  map[string]bool{},
		received:       make(chan string, 1000),
	}
	for _, o := range opts {
		o(f)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	if f.wrapListener != nil {
		lis = f.wrapListener(lis)
	}
	f.srv = grpc.NewServer(grpc.UnaryInterceptor(f.intercept))
	csi.RegisterIdentityServer(f.srv, f)
	csi.RegisterControllerServer(f.srv, f)
	csi.RegisterNodeServer(f.srv, f)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.srv.Serve(lis)
	}()
	t.Cleanup(func() {
		f.srv.Stop()
		<-done
	})
	return f
}

// intercept records the request, then applies the knobs for its method in
// the order a real driver would show them: delay, unimplemented, error,
// canned response.
func (f *fakeUpstream) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
	f.mu.Lock()
	f.calls = append(f.calls, fakeCall{Method: method, Req: proto.Clone(req.(proto.Message))})
	delay, ok := f.delays[method]
	if !ok {
		delay = f.delays["*"]
	}
	unimpl, err, resp := f.unimplemented[method], f.errs[method], f.responses[method]
	f.mu.Unlock()
	select {
	case f.received <- method:
	default:
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	switch {
	case unimpl:
		return nil, status.Errorf(codes.Unimplemented, "method %s not implemented", method)
	case err != nil:
		return nil, err
	case resp != nil:
		return proto.Clone(resp), nil
	}
	return handler(ctx, req)
}

// setErr makes method fail with err.
func (f *fakeUpstream) setErr(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs[method] = err
}

// setDelay makes method wait d (or until cancelled) before answering.
func (f *fakeUpstream) setDelay(method string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delays[method] = d
}

// setResponse makes method answer resp, whatever the request.
func (f *fakeUpstream) setResponse(method string, resp proto.Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.responses[method] = resp
}

// setUnimplemented makes method answer UNIMPLEMENTED.
func (f *fakeUpstream) setUnimplemented(method string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unimplemented[method] = true
}

// isProbe tells capability discovery apart from the calls a test routes.
func isProbe(method string) bool {
	switch method {
	case "ControllerGetCapabilities", "NodeGetCapabilities", "GetPluginInfo", "GetPluginCapabilities", "Probe":
		return true
	}
	return false
}

// routed returns the methods received, in order, without capability
// discovery.
func (f *fakeUpstream) routed() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if !isProbe(c.Method) {
			out = append(out, c.Method)
		}
	}
	return out
}

// requests returns every request received for method.
func (f *fakeUpstream) requests(method string) []proto.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []proto.Message
	for _, c := range f.calls {
		if c.Method == method {
			out = append(out, c.Req)
		}
	}
	return out
}

// only returns the single request received for method, failing the test if
// there was not exactly one.
func only[T proto.Message](t *testing.T, f *fakeUpstream, method string) T {
	t.Helper()
	reqs := f.requests(method)
	if len(reqs) != 1 {
		t.Fatalf("upstream received %d %s requests, want 1 (routed calls: %v)", len(reqs), method, f.routed())
	}
	return reqs[0].(T)
}

// waitFor blocks until the fake has received method, or fails after 5s.
func (f *fakeUpstream) waitFor(t *testing.T, method string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case m := <-f.received:
			if m == method {
				return
			}
		case <-deadline:
			t.Fatalf("upstream never received %s", method)
		}
	}
}

// Default behaviour: a small, deterministic driver.

func (f *fakeUpstream) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: "fake.upstream", VendorVersion: "1"}, nil
}

func (f *fakeUpstream) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

func (f *fakeUpstream) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	return controllerCapsResponse(f.controllerCaps), nil
}

func (f *fakeUpstream) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return nodeCapsResponse(f.nodeCaps), nil
}

// controllerCapsResponse and nodeCapsResponse answer a capability query of
// the test upstreams.
func controllerCapsResponse(types []csi.ControllerServiceCapability_RPC_Type) *csi.ControllerGetCapabilitiesResponse {
	resp := &csi.ControllerGetCapabilitiesResponse{}
	for _, t := range types {
		resp.Capabilities = append(resp.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return resp
}

func nodeCapsResponse(types []csi.NodeServiceCapability_RPC_Type) *csi.NodeGetCapabilitiesResponse {
	resp := &csi.NodeGetCapabilitiesResponse{}
	for _, t := range types {
		resp.Capabilities = append(resp.Capabilities, &csi.NodeServiceCapability{
			Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}})
	}
	return resp
}

// upstreamTopology is what the fake reports as its own topology; the proxy
// must never pass these keys to the CO.
var upstreamTopology = []*csi.Topology{{Segments: map[string]string{"upstream.example.com/rack": "r7"}}}

// CreateVolume answers no accessible_topology: an upstream that answers
// one is refused for a connection without topology (widen_test.go), so
// tests that want it set it with setResponse.
func (f *fakeUpstream) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:      "vol-" + req.GetName(),
		CapacityBytes: req.GetCapacityRange().GetRequiredBytes(),
		VolumeContext: map[string]string{"from": "upstream"},
	}}, nil
}

func (f *fakeUpstream) DeleteVolume(context.Context, *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	return &csi.DeleteVolumeResponse{}, nil
}

func (f *fakeUpstream) ControllerGetVolume(_ context.Context, req *csi.ControllerGetVolumeRequest) (*csi.ControllerGetVolumeResponse, error) {
	return &csi.ControllerGetVolumeResponse{
		Volume: &csi.Volume{VolumeId: req.GetVolumeId(), CapacityBytes: 1 << 30, AccessibleTopology: upstreamTopology},
		Status: &csi.ControllerGetVolumeResponse_VolumeStatus{PublishedNodeIds: []string{"n1"}},
	}, nil
}

func (f *fakeUpstream) ControllerExpandVolume(_ context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: req.GetCapacityRange().GetRequiredBytes(), NodeExpansionRequired: true}, nil
}

func (f *fakeUpstream) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	// Echo what the upstream saw, so a test can check the proxy replaces
	// the merged parameters with the CO's own.
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

func (f *fakeUpstream) CreateSnapshot(_ context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	return &csi.CreateSnapshotResponse{Snapshot: &csi.Snapshot{
		SnapshotId: "snap-" + req.GetName(), SourceVolumeId: req.GetSourceVolumeId(), SizeBytes: 7, ReadyToUse: true,
	}}, nil
}

func (f *fakeUpstream) DeleteSnapshot(context.Context, *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	return &csi.DeleteSnapshotResponse{}, nil
}

func (f *fakeUpstream) GetCapacity(context.Context, *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	return &csi.GetCapacityResponse{AvailableCapacity: 42}, nil
}

func (f *fakeUpstream) ControllerPublishVolume(context.Context, *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	return &csi.ControllerPublishVolumeResponse{PublishContext: map[string]string{"lun": "3"}}, nil
}

func (f *fakeUpstream) ControllerUnpublishVolume(context.Context, *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

func (f *fakeUpstream) ListVolumes(_ context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	entries, next, err := fakePage(f.listVolumes, req.GetStartingToken(), req.GetMaxEntries(), f.pageSize)
	if err != nil {
		return nil, err
	}
	return &csi.ListVolumesResponse{Entries: entries, NextToken: next}, nil
}

func (f *fakeUpstream) ListSnapshots(_ context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var match []*csi.Snapshot
	for _, s := range f.listSnapshots {
		if id := req.GetSnapshotId(); id != "" && s.GetSnapshotId() != id {
			continue
		}
		if src := req.GetSourceVolumeId(); src != "" && s.GetSourceVolumeId() != src {
			continue
		}
		match = append(match, s)
	}
	snaps, next, err := fakePage(match, req.GetStartingToken(), req.GetMaxEntries(), f.pageSize)
	if err != nil {
		return nil, err
	}
	resp := &csi.ListSnapshotsResponse{NextToken: next}
	for _, s := range snaps {
		resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: s})
	}
	return resp, nil
}

// fakePage returns the page of all that starts at token, at most max
// entries (0: no limit) and at most pageSize (0: no limit), and the token
// of the next page ("" after the last).
func fakePage[T any](all []T, token string, max int32, pageSize int) ([]T, string, error) {
	start := 0
	if token != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(token, "up-"))
		if !strings.HasPrefix(token, "up-") || err != nil || n <= 0 || n >= len(all) {
			return nil, "", status.Errorf(codes.Aborted, "starting_token %q was not made by this upstream", token)
		}
		start = n
	}
	n := len(all) - start
	if max > 0 && int(max) < n {
		n = int(max)
	}
	if pageSize > 0 && pageSize < n {
		n = pageSize
	}
	next := ""
	if start+n < len(all) {
		next = "up-" + strconv.Itoa(start+n)
	}
	return all[start : start+n], next, nil
}

func (f *fakeUpstream) NodeStageVolume(context.Context, *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	return &csi.NodeStageVolumeResponse{}, nil
}

func (f *fakeUpstream) NodeUnstageVolume(context.Context, *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func (f *fakeUpstream) NodePublishVolume(context.Context, *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	return &csi.NodePublishVolumeResponse{}, nil
}

func (f *fakeUpstream) NodeUnpublishVolume(context.Context, *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

func (f *fakeUpstream) NodeGetVolumeStats(context.Context, *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{Total: 100, Used: 40, Available: 60, Unit: csi.VolumeUsage_BYTES}}}, nil
}

func (f *fakeUpstream) NodeExpandVolume(_ context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	return &csi.NodeExpandVolumeResponse{CapacityBytes: req.GetCapacityRange().GetRequiredBytes()}, nil
}
