package csi_test

import (
	"strings"
	"sync"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
)

// lostReplies records Options.OnLostReply.
type lostReplies struct {
	mu  sync.Mutex
	got []string
}

func (l *lostReplies) option(o *pcsi.Options) {
	o.OnLostReply = func(connection, method string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.got = append(l.got, connection+" "+method)
	}
}

func (l *lostReplies) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.got...)
}

// bigVolume is a CreateVolume reply of about size bytes: a volume whose
// volume_context holds one large value.
func bigVolume(id string, size int) *csi.CreateVolumeResponse {
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: id, CapacityBytes: 1 << 20,
		VolumeContext: map[string]string{"blob": strings.Repeat("x", size)}}}
}

// TestLargeUpstreamReply (issue 38, probe 2): an upstream reply over
// gRPC's default 4 MiB made the proxy answer RESOURCE_EXHAUSTED and leave
// the volume behind. The proxy now receives up to 16 MiB
// (upstream.MaxReplySize): a reply it can read but the CO could not (over
// 4 MiB) names the object, which is deleted; a reply over 16 MiB is lost,
// answered INTERNAL, logged with the request name and connection,
// counted, and nothing is retried or deleted blindly. The fake upstream is
// a real gRPC server, so the limits are gRPC's own.
func TestLargeUpstreamReply(t *testing.T) {
	for _, tc := range []struct {
		name       string
		size       int
		wantMsg    []string
		wantRouted []string
		wantLost   []string
	}{
		{
			name: "readable, too large for the CO", size: 6 << 20,
			wantMsg:    []string{`connection "big"`, "more than the 4 MiB a CO receives", "the upstream object was deleted"},
			wantRouted: []string{"CreateVolume", "DeleteVolume"},
		},
		{
			name: "over the proxy's limit", size: 17 << 20,
			wantMsg:    []string{`connection "big"`, `CreateVolume "pvc-big"`, "grpc: received message larger than max", "16 MiB", "may exist upstream", "deleted nothing"},
			wantRouted: []string{"CreateVolume"},
			wantLost:   []string{"big CreateVolume"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var lost lostReplies
			up := newFakeUpstream(t)
			up.setResponse("CreateVolume", bigVolume("up-vol-1", tc.size))
			p := startProxy(t, lost.option)
			p.add(t, "big", conn{Endpoint: up.Endpoint})
			_, err := p.Controller.CreateVolume(callCtx(t), createReq("pvc-big", map[string]string{"connection": "big"}))
			st := status.Convert(err)
			if st.Code() != codes.Internal {
				t.Fatalf("CreateVolume = %v, want INTERNAL (never RESOURCE_EXHAUSTED, which reschedules the claim)", err)
			}
			for _, w := range tc.wantMsg {
				if !strings.Contains(st.Message(), w) {
					t.Errorf("message lacks %q: %s", w, st.Message())
				}
			}
			if got := up.routed(); strings.Join(got, ",") != strings.Join(tc.wantRouted, ",") {
				t.Errorf("upstream received %v, want %v (no retry, no blind delete)", got, tc.wantRouted)
			}
			if len(tc.wantRouted) > 1 {
				if del := only[*csi.DeleteVolumeRequest](t, up, "DeleteVolume"); del.GetVolumeId() != "up-vol-1" {
					t.Errorf("deleted %q, want the upstream's up-vol-1", del.GetVolumeId())
				}
			}
			if got := lost.list(); strings.Join(got, ",") != strings.Join(tc.wantLost, ",") {
				t.Errorf("lost replies counted %v, want %v", got, tc.wantLost)
			}
			if tc.wantLost != nil {
				logs := p.Logs.String()
				line := ""
				for _, l := range strings.Split(logs, "\n") {
					if strings.Contains(l, `"msg":"the upstream's reply to a create could not be received`) {
						line = l
					}
				}
				for _, w := range []string{`"connection":"big"`, `"name":"pvc-big"`, `"method":"CreateVolume"`, `"level":"ERROR"`} {
					if !strings.Contains(line, w) {
						t.Errorf("the possibly-left log line lacks %s: %s", w, line)
					}
				}
			}
		})
	}
}

// TestLargeSnapshotReply: CreateSnapshot's reply over the proxy's limit is
// lost the same way.
func TestLargeSnapshotReply(t *testing.T) {
	var lost lostReplies
	up := newFakeUpstream(t)
	up.setResponse("CreateSnapshot", &csi.CreateSnapshotResponse{Snapshot: &csi.Snapshot{
		SnapshotId: "up-snap-1", SourceVolumeId: strings.Repeat("v", 17<<20), ReadyToUse: true}})
	p := startProxy(t, lost.option)
	p.add(t, "big", conn{Endpoint: up.Endpoint})
	_, err := p.Controller.CreateSnapshot(callCtx(t), &csi.CreateSnapshotRequest{Name: "snap-big", SourceVolumeId: "v:big/vol-1"})
	if st := status.Convert(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), `CreateSnapshot "snap-big"`) {
		t.Fatalf("CreateSnapshot = %v, want INTERNAL naming the snapshot", err)
	}
	if got := lost.list(); len(got) != 1 || got[0] != "big CreateSnapshot" {
		t.Errorf("lost replies counted %v, want [big CreateSnapshot]", got)
	}
	if got := up.routed(); len(got) != 1 {
		t.Errorf("upstream received %v, want CreateSnapshot alone", got)
	}
}

// TestUpstreamResourceExhaustedPassesThrough: an upstream's own
// RESOURCE_EXHAUSTED (no room for the volume) is not a size failure and
// reaches the CO as the upstream said it.
func TestUpstreamResourceExhaustedPassesThrough(t *testing.T) {
	var lost lostReplies
	up := newFakeUpstream(t)
	up.setErr("CreateVolume", status.Error(codes.ResourceExhausted, "pool is full"))
	p := startProxy(t, lost.option)
	p.add(t, "full", conn{Endpoint: up.Endpoint})
	_, err := p.Controller.CreateVolume(callCtx(t), createReq("pvc-1", map[string]string{"connection": "full"}))
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "pool is full") {
		t.Fatalf("CreateVolume = %v, want the upstream's RESOURCE_EXHAUSTED", err)
	}
	if got := lost.list(); len(got) != 0 {
		t.Errorf("an upstream's refusal was counted as a lost reply: %v", got)
	}
}
