package csi_test

import (
	"fmt"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

// snapshotListingProxy has connections a (3 snapshots, upstream pages of
// 2), b (an upstream without LIST_SNAPSHOTS) and c (2 snapshots).
func snapshotListingProxy(t *testing.T) (*testProxy, map[string]*fakeUpstream) {
	t.Helper()
	fakes := map[string]*fakeUpstream{
		"a": newFakeUpstream(t, withControllerCaps(listCaps...), withPageSize(2),
			withSnapshots("sa1", "va1", "sa2", "va1", "sa3", "va2")),
		"b": newFakeUpstream(t, withControllerCaps(csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT),
			withSnapshots("sb1", "vb1")),
		"c": newFakeUpstream(t, withControllerCaps(listCaps...), withSnapshots("sc1", "vc1", "sc2", "vc1")),
	}
	p := startProxy(t)
	for _, name := range []string{"a", "b", "c"} {
		p.add(t, name, conn{Endpoint: fakes[name].Endpoint, Secrets: map[string]string{"user": "conn-user"}})
	}
	return p, fakes
}

func snapshotEntry(conn, snap, source string) *csi.ListSnapshotsResponse_Entry {
	return &csi.ListSnapshotsResponse_Entry{Snapshot: &csi.Snapshot{
		SnapshotId: "s:" + conn + "/" + snap, SourceVolumeId: "v:" + conn + "/" + source, SizeBytes: 7, ReadyToUse: true}}
}

// TestListSnapshotsPaging: the same fan-out as ListVolumes, with both IDs
// of every entry wrapped.
func TestListSnapshotsPaging(t *testing.T) {
	want := []*csi.ListSnapshotsResponse_Entry{
		snapshotEntry("a", "sa1", "va1"), snapshotEntry("a", "sa2", "va1"), snapshotEntry("a", "sa3", "va2"),
		snapshotEntry("c", "sc1", "vc1"), snapshotEntry("c", "sc2", "vc1"),
	}
	for _, max := range []int32{0, 1, 2, 3, 5, 6} {
		t.Run(fmt.Sprintf("max_entries=%d", max), func(t *testing.T) {
			p, fakes := snapshotListingProxy(t)
			got := listAllSnapshots(t, p.Controller, max, map[string]string{"password": "s3cr3t-req"})
			if d := diff(want, got); d != "" {
				t.Errorf("entries (-want +got):\n%s", d)
			}
			if n := len(fakes["b"].requests("ListSnapshots")); n != 0 {
				t.Errorf("upstream without LIST_SNAPSHOTS was asked %d times", n)
			}
			for _, r := range fakes["a"].requests("ListSnapshots") {
				r := r.(*csi.ListSnapshotsRequest)
				if d := diff(map[string]string{"password": "s3cr3t-req", "user": "conn-user"}, r.GetSecrets()); d != "" {
					t.Errorf("upstream secrets (-want +got):\n%s", d)
				}
				if r.GetSnapshotId() != "" || r.GetSourceVolumeId() != "" {
					t.Errorf("upstream got a filter: %v", r)
				}
			}
		})
	}
}

// TestListSnapshotsBadToken: the fan-out validates its tokens as
// ListVolumes does.
func TestListSnapshotsBadToken(t *testing.T) {
	p, _ := snapshotListingProxy(t)
	for _, tok := range []string{"garbage", "pt1.YQ.*", "pt1.YQ.dXAtOTk"} {
		_, err := p.Controller.ListSnapshots(callCtx(t), &csi.ListSnapshotsRequest{StartingToken: tok})
		testkit.WantCode(t, err, codes.Aborted)
	}
	_, err := p.Controller.ListSnapshots(callCtx(t), &csi.ListSnapshotsRequest{MaxEntries: -1})
	testkit.WantCode(t, err, codes.InvalidArgument, "max_entries")
}

// TestListSnapshotsFilters: a snapshot_id or source_volume_id filter goes
// to the one connection it names, unwrapped; a filter the proxy never made,
// or two filters naming different connections, match nothing.
func TestListSnapshotsFilters(t *testing.T) {
	tests := []struct {
		name     string
		req      *csi.ListSnapshotsRequest
		want     []*csi.ListSnapshotsResponse_Entry
		wantNext string
		// wantUp is the one request connection conn's upstream gets; nil:
		// no upstream gets any.
		conn   string
		wantUp *csi.ListSnapshotsRequest
	}{
		{
			name: "snapshot_id",
			req:  &csi.ListSnapshotsRequest{SnapshotId: "s:c/sc2"},
			want: []*csi.ListSnapshotsResponse_Entry{snapshotEntry("c", "sc2", "vc1")},
			conn: "c", wantUp: &csi.ListSnapshotsRequest{SnapshotId: "sc2", Secrets: map[string]string{"user": "conn-user"}},
		},
		{
			name: "snapshot_id that does not exist",
			req:  &csi.ListSnapshotsRequest{SnapshotId: "s:c/sc9"},
			conn: "c", wantUp: &csi.ListSnapshotsRequest{SnapshotId: "sc9", Secrets: map[string]string{"user": "conn-user"}},
		},
		{
			name: "source_volume_id",
			req:  &csi.ListSnapshotsRequest{SourceVolumeId: "v:a/va1", Secrets: map[string]string{"password": "s3cr3t-req"}},
			want: []*csi.ListSnapshotsResponse_Entry{snapshotEntry("a", "sa1", "va1"), snapshotEntry("a", "sa2", "va1")},
			conn: "a", wantUp: &csi.ListSnapshotsRequest{SourceVolumeId: "va1",
				Secrets: map[string]string{"password": "s3cr3t-req", "user": "conn-user"}},
		},
		{
			// With a filter the listing stays on one connection, so the
			// upstream's own token is handed out and taken back as is.
			name: "source_volume_id, one per page",
			req:  &csi.ListSnapshotsRequest{SourceVolumeId: "v:a/va1", MaxEntries: 1},
			want: []*csi.ListSnapshotsResponse_Entry{snapshotEntry("a", "sa1", "va1")}, wantNext: "up-1",
			conn: "a", wantUp: &csi.ListSnapshotsRequest{SourceVolumeId: "va1", MaxEntries: 1, Secrets: map[string]string{"user": "conn-user"}},
		},
		{
			name: "both filters on one connection",
			req:  &csi.ListSnapshotsRequest{SnapshotId: "s:a/sa3", SourceVolumeId: "v:a/va2"},
			want: []*csi.ListSnapshotsResponse_Entry{snapshotEntry("a", "sa3", "va2")},
			conn: "a", wantUp: &csi.ListSnapshotsRequest{SnapshotId: "sa3", SourceVolumeId: "va2", Secrets: map[string]string{"user": "conn-user"}},
		},
		{name: "filters naming two connections", req: &csi.ListSnapshotsRequest{SnapshotId: "s:a/sa1", SourceVolumeId: "v:c/vc1"}},
		{name: "malformed snapshot_id", req: &csi.ListSnapshotsRequest{SnapshotId: "sa1"}},
		{name: "snapshot_id of the volume kind", req: &csi.ListSnapshotsRequest{SnapshotId: "v:a/sa1"}},
		{name: "malformed source_volume_id", req: &csi.ListSnapshotsRequest{SourceVolumeId: "v:a/"}},
		{name: "malformed source_volume_id with a good snapshot_id", req: &csi.ListSnapshotsRequest{SnapshotId: "s:a/sa1", SourceVolumeId: "va1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, fakes := snapshotListingProxy(t)
			resp, err := p.Controller.ListSnapshots(callCtx(t), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if d := diff(&csi.ListSnapshotsResponse{Entries: tt.want, NextToken: tt.wantNext}, resp); d != "" {
				t.Errorf("response (-want +got):\n%s", d)
			}
			for name, f := range fakes {
				if name == tt.conn {
					if d := diff(tt.wantUp, only[*csi.ListSnapshotsRequest](t, f, "ListSnapshots")); d != "" {
						t.Errorf("connection %s's upstream request (-want +got):\n%s", name, d)
					}
					continue
				}
				if got := f.routed(); len(got) != 0 {
					t.Errorf("connection %s's upstream received %v", name, got)
				}
			}
		})
	}
}

// TestListSnapshotsFilterRefused: a filter naming a connection that is gone
// or cannot list, or a negative max_entries, is an error, not an empty list.
func TestListSnapshotsFilterRefused(t *testing.T) {
	tests := []struct {
		name string
		req  *csi.ListSnapshotsRequest
		code codes.Code
		msg  string
	}{
		{name: "missing connection", req: &csi.ListSnapshotsRequest{SnapshotId: "s:gone/s1"}, code: codes.FailedPrecondition, msg: `"gone"`},
		{name: "upstream without LIST_SNAPSHOTS", req: &csi.ListSnapshotsRequest{SourceVolumeId: "v:b/vb1"},
			code: codes.InvalidArgument, msg: `connection "b" (driver csi) does not support ListSnapshots`},
		{name: "negative max_entries", req: &csi.ListSnapshotsRequest{SnapshotId: "s:a/sa1", MaxEntries: -1}, code: codes.InvalidArgument, msg: "max_entries"},
		{name: "negative max_entries, malformed filter", req: &csi.ListSnapshotsRequest{SnapshotId: "sa1", MaxEntries: -1}, code: codes.InvalidArgument, msg: "max_entries"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, fakes := snapshotListingProxy(t)
			_, err := p.Controller.ListSnapshots(callCtx(t), tt.req)
			testkit.WantCode(t, err, tt.code, tt.msg)
			for name, f := range fakes {
				if got := f.routed(); len(got) != 0 {
					t.Errorf("connection %s's upstream received %v", name, got)
				}
			}
		})
	}
}

// TestListSnapshotsSharedEndpoint: two connections to one upstream list
// its snapshots under each of them, both IDs of every entry under that
// connection's name (a VolumeSnapshotContent made through either carries
// that one's ID), on every page size; a filter by a snapshot of one of
// them asks only the upstream and answers under that connection.
func TestListSnapshotsSharedEndpoint(t *testing.T) {
	want := []*csi.ListSnapshotsResponse_Entry{
		snapshotEntry("x", "s1", "v1"), snapshotEntry("x", "s2", "v2"),
		snapshotEntry("y", "o1", "w1"),
		snapshotEntry("z", "s1", "v1"), snapshotEntry("z", "s2", "v2"),
	}
	for _, max := range []int32{0, 1, 2, 3} {
		t.Run(fmt.Sprintf("max_entries=%d", max), func(t *testing.T) {
			shared := newFakeUpstream(t, withControllerCaps(listCaps...), withSnapshots("s1", "v1", "s2", "v2"))
			other := newFakeUpstream(t, withControllerCaps(listCaps...), withSnapshots("o1", "w1"))
			p := startProxy(t)
			p.add(t, "x", conn{Endpoint: shared.Endpoint})
			p.add(t, "y", conn{Endpoint: other.Endpoint})
			p.add(t, "z", conn{Endpoint: shared.Endpoint, Topology: zoneEntries("z1")})
			got := listAllSnapshots(t, p.Controller, max, nil)
			if d := diff(want, got); d != "" {
				t.Errorf("entries (-want +got):\n%s", d)
			}
			resp, err := p.Controller.ListSnapshots(callCtx(t), &csi.ListSnapshotsRequest{SnapshotId: "s:z/s2"})
			if err != nil {
				t.Fatal(err)
			}
			if d := diff([]*csi.ListSnapshotsResponse_Entry{snapshotEntry("z", "s2", "v2")}, resp.GetEntries()); d != "" {
				t.Errorf("filtered by s:z/s2 (-want +got):\n%s", d)
			}
		})
	}
}

// listAllSnapshots follows ListSnapshots' next_token from the first page
// to the last, max entries a page (0: no limit), with secrets, checking
// that no page is over max and that the token advances.
func listAllSnapshots(t *testing.T, c csi.ControllerClient, max int32, secrets map[string]string) []*csi.ListSnapshotsResponse_Entry {
	t.Helper()
	var got []*csi.ListSnapshotsResponse_Entry
	token := ""
	for pages := 1; ; pages++ {
		if pages > 20 {
			t.Fatalf("more than 20 pages; the token does not advance (last %q)", token)
		}
		resp, err := c.ListSnapshots(callCtx(t), &csi.ListSnapshotsRequest{MaxEntries: max, StartingToken: token, Secrets: secrets})
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		if max > 0 && len(resp.GetEntries()) > int(max) {
			t.Errorf("page %d has %d entries", pages, len(resp.GetEntries()))
		}
		got = append(got, resp.GetEntries()...)
		if token = resp.GetNextToken(); token == "" {
			return got
		}
	}
}
