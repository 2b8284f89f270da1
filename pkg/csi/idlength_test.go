package csi_test

import (
	"strings"
	"sync"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
)

// withMaxIDLength sets proxy.maxIdLength.
func withMaxIDLength(n int) func(*pcsi.Options) {
	return func(o *pcsi.Options) { o.MaxIDLength = n }
}

// longIDCounter records Options.OnLongID reports.
type longIDCounter struct {
	mu sync.Mutex
	n  map[string]int // "<connection>/<kind>" -> count
}

func (c *longIDCounter) option(o *pcsi.Options) {
	o.OnLongID = func(connection, kind string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.n == nil {
			c.n = map[string]int{}
		}
		c.n[connection+"/"+kind]++
	}
}

func (c *longIDCounter) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

// TestLongIDsByDefault: without proxy.maxIdLength, IDs over 128 bytes (the
// seed's 123-byte snapshot handles under a 30-byte connection name) are
// returned for volumes and snapshots alike, counted every time and warned
// about once per connection and kind, with both lengths in the log line.
func TestLongIDsByDefault(t *testing.T) {
	handle := strings.Repeat("h", 123)
	name := strings.Repeat("c", 30)
	f := newFakeUpstream(t)
	f.setResponse("CreateVolume", &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: handle}})
	f.setResponse("CreateSnapshot", &csi.CreateSnapshotResponse{Snapshot: &csi.Snapshot{SnapshotId: handle, ReadyToUse: true}})
	var counter longIDCounter
	p := startProxy(t, counter.option)
	p.add(t, name, conn{Endpoint: f.Endpoint})
	ctx := callCtx(t)
	var volID string
	for i := 0; i < 3; i++ {
		resp, err := p.Controller.CreateVolume(ctx, createReq("pvc-1", map[string]string{"connection": name}))
		if err != nil {
			t.Fatal(err)
		}
		volID = resp.GetVolume().GetVolumeId()
	}
	if want := "v:" + name + "/" + handle; volID != want {
		t.Fatalf("volume_id = %q, want %q", volID, want)
	}
	snap, err := p.Controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-1", SourceVolumeId: volID})
	if err != nil {
		t.Fatal(err)
	}
	if want := "s:" + name + "/" + handle; snap.GetSnapshot().GetSnapshotId() != want {
		t.Fatalf("snapshot_id = %q, want %q", snap.GetSnapshot().GetSnapshotId(), want)
	}
	if got := snap.GetSnapshot().GetSourceVolumeId(); got != volID {
		t.Errorf("source_volume_id = %q, want %q", got, volID)
	}
	// The long IDs route back to the upstream.
	if _, err := p.Controller.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshot().GetSnapshotId()}); err != nil {
		t.Fatal(err)
	}
	if got := only[*csi.DeleteSnapshotRequest](t, f, "DeleteSnapshot").GetSnapshotId(); got != handle {
		t.Errorf("DeleteSnapshot reached the upstream with %q, want the handle", got)
	}
	if got := len(f.requests("DeleteVolume")); got != 0 {
		t.Errorf("%d DeleteVolume calls: nothing may be rolled back without a limit", got)
	}
	if got := counter.get(name + "/volume"); got != 3 {
		t.Errorf("OnLongID volume count = %d, want 3", got)
	}
	if got := counter.get(name + "/snapshot"); got != 1 {
		t.Errorf("OnLongID snapshot count = %d, want 1", got)
	}
	logs := p.Logs.String()
	if n := strings.Count(logs, `"msg":"a volume id is longer than the CSI limit`); n != 1 {
		t.Errorf("%d volume warnings, want 1 (once per connection):\n%s", n, logs)
	}
	if n := strings.Count(logs, `"msg":"a snapshot id is longer than the CSI limit`); n != 1 {
		t.Errorf("%d snapshot warnings, want 1:\n%s", n, logs)
	}
	for _, part := range []string{`"id_bytes":156`, `"connection_name_bytes":30`, `"upstream_handle_bytes":123`, `"connection":"` + name + `"`} {
		if !strings.Contains(logs, part) {
			t.Errorf("log lacks %s:\n%s", part, logs)
		}
	}
}

// TestLongSnapshotIDRefusedWithLimit: proxy.maxIdLength 128 refuses the
// same snapshot, deletes it upstream first, and says how long the
// connection name and the handle are.
func TestLongSnapshotIDRefusedWithLimit(t *testing.T) {
	handle := strings.Repeat("h", 123)
	f := newFakeUpstream(t)
	f.setResponse("CreateSnapshot", &csi.CreateSnapshotResponse{Snapshot: &csi.Snapshot{SnapshotId: handle, ReadyToUse: true}})
	var counter longIDCounter
	p := startProxy(t, withMaxIDLength(128), counter.option)
	p.add(t, "nas", conn{Endpoint: f.Endpoint})
	_, err := p.Controller.CreateSnapshot(callCtx(t), &csi.CreateSnapshotRequest{Name: "snap-1", SourceVolumeId: "v:nas/vol-1"})
	testkit.WantCode(t, err, codes.InvalidArgument, `connection "nas"`, "snapshot id would be 129 bytes, over proxy.maxIdLength 128",
		`connection name "nas" is 3 bytes`, "upstream handle is 123 bytes", "the upstream object was deleted")
	if got := only[*csi.DeleteSnapshotRequest](t, f, "DeleteSnapshot").GetSnapshotId(); got != handle {
		t.Errorf("rollback deleted %q, want the handle", got)
	}
	if got := counter.get("nas/snapshot"); got != 0 {
		t.Errorf("OnLongID = %d for a refused id, want 0", got)
	}
}
