package csi_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
)

// endlessLister pages without end: each ListVolumes answers one entry and
// a next_token, either the token it was given (echo) or a new one.
type endlessLister struct {
	csi.UnimplementedControllerServer
	echo  bool
	delay time.Duration
	calls atomic.Int64
}

func (s *endlessLister) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	return controllerCapsResponse([]csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES, csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csi.ControllerServiceCapability_RPC_LIST_VOLUME_HEALTH,
	}), nil
}

func (s *endlessLister) next(tok string) string {
	n := s.calls.Add(1)
	if s.delay > 0 {
		time.Sleep(s.delay)
	}
	if s.echo && tok != "" {
		return tok
	}
	return "page-" + strconv.FormatInt(n, 10)
}

func (s *endlessLister) ListVolumes(_ context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	next := s.next(req.GetStartingToken())
	return &csi.ListVolumesResponse{NextToken: next, Entries: []*csi.ListVolumesResponse_Entry{{Volume: &csi.Volume{VolumeId: "vol-" + next}}}}, nil
}

func (s *endlessLister) ListSnapshots(_ context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	next := s.next(req.GetStartingToken())
	return &csi.ListSnapshotsResponse{NextToken: next, Entries: []*csi.ListSnapshotsResponse_Entry{{Snapshot: &csi.Snapshot{SnapshotId: "snap-" + next, SourceVolumeId: "vol-1"}}}}, nil
}

func (s *endlessLister) ControllerListVolumeHealth(_ context.Context, req *csi.ControllerListVolumeHealthRequest) (*csi.ControllerListVolumeHealthResponse, error) {
	next := s.next(req.GetStartingToken())
	return &csi.ControllerListVolumeHealthResponse{NextToken: next, Entries: []*csi.VolumeHealth{{VolumeId: "vol-" + next}}}, nil
}

func serveEndless(t *testing.T, s *endlessLister) string {
	t.Helper()
	path := filepath.Join(testkit.SocketDir(t), "endless.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	csi.RegisterControllerServer(srv, s)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return "unix://" + path
}

// TestListingBounded: an upstream that echoes its next_token, one that
// pages without end and one that pages too slowly are each cut off with an
// error naming the connection and its endpoint, after a bounded number of
// calls. The defect: the fan-out looped until the upstream stopped handing
// out tokens (13,168 calls in one listing).
func TestListingBounded(t *testing.T) {
	lists := []struct {
		name string
		call func(ctx context.Context, p *testProxy) error
	}{
		{"ListVolumes", func(ctx context.Context, p *testProxy) error {
			_, err := p.Controller.ListVolumes(ctx, &csi.ListVolumesRequest{})
			return err
		}},
		{"ListSnapshots", func(ctx context.Context, p *testProxy) error {
			_, err := p.Controller.ListSnapshots(ctx, &csi.ListSnapshotsRequest{})
			return err
		}},
		{"ControllerListVolumeHealth", func(ctx context.Context, p *testProxy) error {
			_, err := p.Controller.ControllerListVolumeHealth(ctx, &csi.ControllerListVolumeHealthRequest{})
			return err
		}},
	}
	for _, tt := range []struct {
		name     string
		echo     bool
		delay    time.Duration
		code     codes.Code
		want     string
		maxCalls int64
	}{
		{"echo", true, 0, codes.Internal, `returned next_token "page-1" again after 2 pages`, 2},
		{"endless", false, 0, codes.Internal, "still returned a next_token after 50 pages", 50},
		{"slow", false, 20 * time.Millisecond, codes.DeadlineExceeded, "", 40},
	} {
		for _, l := range lists {
			t.Run(tt.name+"/"+l.name, func(t *testing.T) {
				lister := &endlessLister{echo: tt.echo, delay: tt.delay}
				ep := serveEndless(t, lister)
				p := startProxy(t, func(o *pcsi.Options) { o.MaxListPages = 50; o.ListTimeout = 300 * time.Millisecond })
				p.add(t, "bad", conn{Endpoint: ep})
				start := time.Now()
				err := l.call(callCtx(t), p)
				testkit.WantCode(t, err, tt.code, `connection "bad"`, "endpoint "+ep, tt.want)
				if d := time.Since(start); d > 5*time.Second {
					t.Errorf("the listing took %v", d)
				}
				if n := lister.calls.Load(); n > tt.maxCalls {
					t.Errorf("%d upstream calls, want at most %d", n, tt.maxCalls)
				}
			})
		}
	}

	// A CO paging on with a token the upstream then hands back is cut off
	// too, with or without a snapshot filter.
	ep := serveEndless(t, &endlessLister{echo: true})
	p := startProxy(t)
	p.add(t, "bad", conn{Endpoint: ep})
	first, err := p.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{MaxEntries: 1})
	if err != nil || first.GetNextToken() == "" {
		t.Fatalf("first page: %v, %v", first, err)
	}
	_, err = p.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{MaxEntries: 1, StartingToken: first.GetNextToken()})
	testkit.WantCode(t, err, codes.Internal, `connection "bad"`, `next_token "page-1" again`)
	_, err = p.Controller.ListSnapshots(callCtx(t), &csi.ListSnapshotsRequest{SourceVolumeId: "v:bad/vol-1", StartingToken: "page-7"})
	testkit.WantCode(t, err, codes.Internal, `connection "bad"`, `ListSnapshots returned next_token "page-7" again`)
}

// TestEditTakesEffectNextCall: a connection file edited while a call runs
// on it. The call finishes on the upstream it started on; the next call
// goes to the new one; once the running call ends, the old client is
// released, so the pool holds one client per live connection.
func TestEditTakesEffectNextCall(t *testing.T) {
	for _, cache := range []time.Duration{0, -1, time.Hour} {
		t.Run(fmt.Sprint("cache ", cache), func(t *testing.T) {
			up1, up2 := newFakeUpstream(t), newFakeUpstream(t)
			up1.setDelay("CreateVolume", 500*time.Millisecond)
			p := startProxyStore(t, func(o *connection.Options) { o.CacheTimeout = cache })
			p.add(t, "x", conn{Endpoint: up1.Endpoint})
			done := make(chan error, 1)
			go func() {
				_, err := p.Controller.CreateVolume(callCtx(t), &csi.CreateVolumeRequest{Name: "pvc-1", Parameters: map[string]string{"connection": "x"}, VolumeCapabilities: []*csi.VolumeCapability{testkit.RWO()}})
				done <- err
			}()
			up1.waitFor(t, "CreateVolume")
			p.add(t, "x", conn{Endpoint: up2.Endpoint, Parameters: map[string]string{"edited": "yes"}})
			if _, err := p.Controller.CreateVolume(callCtx(t), &csi.CreateVolumeRequest{Name: "pvc-2", Parameters: map[string]string{"connection": "x"}, VolumeCapabilities: []*csi.VolumeCapability{testkit.RWO()}}); err != nil {
				t.Fatalf("CreateVolume after the edit: %v", err)
			}
			if got := only[*csi.CreateVolumeRequest](t, up2, "CreateVolume"); got.GetName() != "pvc-2" || got.GetParameters()["edited"] != "yes" {
				t.Errorf("the call after the edit reached up2 with %v", got)
			}
			if err := <-done; err != nil {
				t.Errorf("the call in flight during the edit: %v", err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				got := p.Pool.Targets()
				if slices.Equal(got, []string{up2.Endpoint}) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("pool holds %v after the call on the old version ended, want only %s", got, up2.Endpoint)
				}
				time.Sleep(5 * time.Millisecond)
			}
			if strings.Contains(p.Logs.String(), "calls still in flight") {
				t.Error("a client was closed under a call")
			}
		})
	}
}
