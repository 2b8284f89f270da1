package csi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

// TestMalformedUpstreamResponses fills in what create_volume_test.go and
// routing_test.go leave out: a 10 KiB id is rolled back like any id that is
// too long, with a short message; answers without the object they describe
// cause no panic.
func TestMalformedUpstreamResponses(t *testing.T) {
	huge := strings.Repeat("x", 10<<10)
	t.Run("10 KiB volume id", func(t *testing.T) {
		f := newFakeUpstream(t)
		f.setResponse("CreateVolume", &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: huge}})
		p := startProxy(t)
		p.add(t, "a", conn{Endpoint: f.Endpoint})
		_, err := p.Controller.CreateVolume(callCtx(t), createReq("pvc-1", map[string]string{"connection": "a"}))
		testkit.WantCode(t, err, codes.InvalidArgument, "upstream volume handle is 10240 bytes, over the 1024 the proxy accepts back", "was deleted")
		wantShort(t, err)
		if got := only[*csi.DeleteVolumeRequest](t, f, "DeleteVolume").GetVolumeId(); got != huge {
			t.Errorf("rollback deleted %.20q…, want the 10 KiB handle", got)
		}
	})
	t.Run("10 KiB snapshot id", func(t *testing.T) {
		f := newFakeUpstream(t)
		f.setResponse("CreateSnapshot", &csi.CreateSnapshotResponse{Snapshot: &csi.Snapshot{SnapshotId: huge, ReadyToUse: true}})
		p := startProxy(t)
		p.add(t, "a", conn{Endpoint: f.Endpoint})
		_, err := p.Controller.CreateSnapshot(callCtx(t), &csi.CreateSnapshotRequest{Name: "snap-1", SourceVolumeId: "v:a/vol-1"})
		testkit.WantCode(t, err, codes.InvalidArgument, "upstream snapshot handle is 10240 bytes", "was deleted")
		wantShort(t, err)
		if got := only[*csi.DeleteSnapshotRequest](t, f, "DeleteSnapshot").GetSnapshotId(); got != huge {
			t.Errorf("rollback deleted %.20q…, want the 10 KiB handle", got)
		}
	})
	t.Run("answers without their object", func(t *testing.T) {
		f := newFakeUpstream(t)
		for method, resp := range map[string]proto.Message{
			"ControllerGetVolume":        &csi.ControllerGetVolumeResponse{},
			"ValidateVolumeCapabilities": &csi.ValidateVolumeCapabilitiesResponse{},
			"ControllerExpandVolume":     &csi.ControllerExpandVolumeResponse{},
			"NodeGetVolumeStats":         &csi.NodeGetVolumeStatsResponse{},
		} {
			f.setResponse(method, resp)
		}
		p := startProxy(t)
		p.add(t, "a", conn{Endpoint: f.Endpoint})
		for _, rc := range routedCalls {
			if err := rc.call(callCtx(t), p, idOf(rc.method, "a", "h-1")); err != nil {
				t.Errorf("%s: %v", rc.method, err)
			}
		}
		if logs := p.Logs.String(); strings.Contains(logs, "panic") {
			t.Errorf("a handler panicked:\n%s", logs)
		}
	})
}

// TestRollbackOutlivesCaller: the caller gives up while the proxy is
// deleting an upstream volume it cannot hand back. The delete still runs
// to its end (it has its own deadline), so nothing leaks because the CO
// was impatient.
func TestRollbackOutlivesCaller(t *testing.T) {
	f := newFakeUpstream(t)
	long := strings.Repeat("x", 125)
	f.setResponse("CreateVolume", &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: long}})
	f.setDelay("DeleteVolume", 600*time.Millisecond)
	p := startProxy(t, withMaxIDLength(128))
	p.add(t, "a", conn{Endpoint: f.Endpoint})
	ctx, cancel := context.WithTimeout(callCtx(t), 300*time.Millisecond)
	defer cancel()
	_, err := p.Controller.CreateVolume(ctx, createReq("pvc-1", map[string]string{"connection": "a"}))
	testkit.WantCode(t, err, codes.DeadlineExceeded)
	f.waitFor(t, "DeleteVolume")
	// The handler goes on after the caller left; its log line says how
	// the rollback ended.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(p.Logs.String(), "the upstream object was deleted") {
		if time.Now().After(deadline) {
			t.Fatalf("no log of a finished rollback:\n%s", p.Logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if logs := p.Logs.String(); strings.Contains(logs, "must be removed by hand") {
		t.Errorf("the rollback was cut short with the caller:\n%s", logs)
	}
}
