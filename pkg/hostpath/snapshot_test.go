package hostpath

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

func TestCreateSnapshot(t *testing.T) {
	ctx := context.Background()
	d := newTestDriver(t, Options{})
	vol := mustCreate(t, d, createReq("v", 5<<20))
	other := mustCreate(t, d, createReq("other", 0))

	first, err := d.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: vol})
	if err != nil {
		t.Fatal(err)
	}
	if first.Snapshot.CreationTime.AsTime().IsZero() {
		t.Errorf("no creation_time")
	}
	want := &csi.CreateSnapshotResponse{Snapshot: &csi.Snapshot{
		SnapshotId: snapshotIDFor("s"), SourceVolumeId: vol, SizeBytes: 5 << 20,
		CreationTime: first.Snapshot.CreationTime, ReadyToUse: true,
	}}
	if diff := cmp.Diff(want, first, protocmp.Transform()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	tests := []struct {
		name string
		req  *csi.CreateSnapshotRequest
		code codes.Code
		msg  string
	}{
		{"retry", &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: vol}, codes.OK, ""},
		{"same name other volume", &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: other}, codes.AlreadyExists, "not of volume " + other},
		{"no name", &csi.CreateSnapshotRequest{SourceVolumeId: vol}, codes.InvalidArgument, "name is required"},
		{"no source", &csi.CreateSnapshotRequest{Name: "x"}, codes.InvalidArgument, "source_volume_id is required"},
		{"source missing", &csi.CreateSnapshotRequest{Name: "x", SourceVolumeId: volumeIDFor("gone")}, codes.NotFound, "not found"},
		{"source not ours", &csi.CreateSnapshotRequest{Name: "x", SourceVolumeId: "../../etc"}, codes.NotFound, "source_volume_id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := d.CreateSnapshot(ctx, tc.req)
			if tc.code != codes.OK {
				testkit.WantCode(t, err, tc.code, tc.msg)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, resp, protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}

	got, err := d.GetSnapshot(ctx, &csi.GetSnapshotRequest{SnapshotId: snapshotIDFor("s")})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want.Snapshot, got.Snapshot, protocmp.Transform()); diff != "" {
		t.Errorf("GetSnapshot (-want +got):\n%s", diff)
	}
	_, err = d.GetSnapshot(ctx, &csi.GetSnapshotRequest{SnapshotId: "none-exist-id"})
	testkit.WantCode(t, err, codes.NotFound)

	for range 2 {
		if _, err := d.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snapshotIDFor("s")}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = d.GetSnapshot(ctx, &csi.GetSnapshotRequest{SnapshotId: snapshotIDFor("s")})
	testkit.WantCode(t, err, codes.NotFound)
	_, err = d.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{})
	testkit.WantCode(t, err, codes.InvalidArgument, "snapshot_id is required")
}

func TestListSnapshotsFilters(t *testing.T) {
	ctx := context.Background()
	d := newTestDriver(t, Options{})
	a := mustCreate(t, d, createReq("a", 0))
	b := mustCreate(t, d, createReq("b", 0))
	a1 := mustSnapshot(t, d, "a1", a)
	a2 := mustSnapshot(t, d, "a2", a)
	b1 := mustSnapshot(t, d, "b1", b)

	ids := func(resp *csi.ListSnapshotsResponse) []string {
		var out []string
		for _, e := range resp.GetEntries() {
			out = append(out, e.GetSnapshot().GetSnapshotId())
		}
		return out
	}
	sorted := func(s ...string) []string { slices.Sort(s); return s }
	tests := []struct {
		name string
		req  *csi.ListSnapshotsRequest
		want []string
	}{
		{"all", &csi.ListSnapshotsRequest{}, sorted(a1, a2, b1)},
		{"by snapshot id", &csi.ListSnapshotsRequest{SnapshotId: a2}, []string{a2}},
		{"by missing snapshot id", &csi.ListSnapshotsRequest{SnapshotId: snapshotIDFor("nope")}, nil},
		{"by foreign snapshot id", &csi.ListSnapshotsRequest{SnapshotId: "none-exist-id"}, nil},
		{"by source", &csi.ListSnapshotsRequest{SourceVolumeId: a}, sorted(a1, a2)},
		{"by source without snapshots", &csi.ListSnapshotsRequest{SourceVolumeId: volumeIDFor("nope")}, nil},
		{"both, matching", &csi.ListSnapshotsRequest{SnapshotId: b1, SourceVolumeId: b}, []string{b1}},
		{"both, not matching", &csi.ListSnapshotsRequest{SnapshotId: b1, SourceVolumeId: a}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := d.ListSnapshots(ctx, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, ids(resp)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	// The source volume going away does not hide its snapshots.
	if _, err := d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: a}); err != nil {
		t.Fatal(err)
	}
	resp, err := d.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SourceVolumeId: a})
	if err != nil || len(resp.Entries) != 2 {
		t.Errorf("snapshots of deleted volume: %v, %v", ids(resp), err)
	}
}

// TestPagination walks ListVolumes and ListSnapshots page by page with every
// page size and checks that the pages add up to the full list.
func TestPagination(t *testing.T) {
	ctx := context.Background()
	d := newTestDriver(t, Options{})
	var vols []string
	for i := range 5 {
		id := mustCreate(t, d, createReq(fmt.Sprintf("pv-%d", i), 0))
		vols = append(vols, id)
		mustSnapshot(t, d, fmt.Sprintf("snap-%d", i), id)
	}
	slices.Sort(vols)

	listVolumes := func(token string, max int32) ([]string, string, error) {
		resp, err := d.ListVolumes(ctx, &csi.ListVolumesRequest{StartingToken: token, MaxEntries: max})
		var ids []string
		for _, e := range resp.GetEntries() {
			ids = append(ids, e.GetVolume().GetVolumeId())
		}
		return ids, resp.GetNextToken(), err
	}
	listSnapshots := func(token string, max int32) ([]string, string, error) {
		resp, err := d.ListSnapshots(ctx, &csi.ListSnapshotsRequest{StartingToken: token, MaxEntries: max})
		var ids []string
		for _, e := range resp.GetEntries() {
			ids = append(ids, e.GetSnapshot().GetSnapshotId())
		}
		return ids, resp.GetNextToken(), err
	}
	for _, lister := range []struct {
		name string
		list func(string, int32) ([]string, string, error)
	}{{"volumes", listVolumes}, {"snapshots", listSnapshots}} {
		all, next, err := lister.list("", 0)
		if err != nil || next != "" || len(all) != 5 {
			t.Fatalf("%s: unpaged list = %v, next %q, %v", lister.name, all, next, err)
		}
		for max := int32(1); max <= 6; max++ {
			t.Run(fmt.Sprintf("%s/max=%d", lister.name, max), func(t *testing.T) {
				var got []string
				token := ""
				for pages := 0; ; pages++ {
					if pages > 10 {
						t.Fatal("pagination does not end")
					}
					ids, next, err := lister.list(token, max)
					if err != nil {
						t.Fatal(err)
					}
					if len(ids) > int(max) {
						t.Fatalf("page of %d entries, max_entries %d", len(ids), max)
					}
					got = append(got, ids...)
					if next == "" {
						break
					}
					token = next
				}
				if diff := cmp.Diff(all, got); diff != "" {
					t.Errorf("pages (-all +concatenated):\n%s", diff)
				}
			})
		}
	}
	if diff := cmp.Diff(vols, mustIDs(listVolumes("", 0))); diff != "" {
		t.Errorf("ListVolumes (-created +listed):\n%s", diff)
	}

	// A token stays valid when its entry is deleted between calls.
	page1, next, err := listVolumes("", 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: next}); err != nil {
		t.Fatal(err)
	}
	rest, _, err := listVolumes(next, 0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(vols[3:], rest); diff != "" || len(page1) != 2 {
		t.Errorf("after deleting the token's volume (-want +got):\n%s", diff)
	}

	for _, bad := range []string{"invalid-token", "vol-xyz", "../x", snapshotIDFor("x")} {
		_, _, err := listVolumes(bad, 0)
		testkit.WantCode(t, err, codes.Aborted, "starting_token")
	}
	_, _, err = listSnapshots(volumeIDFor("x"), 0)
	testkit.WantCode(t, err, codes.Aborted)
	_, _, err = listVolumes("", -1)
	testkit.WantCode(t, err, codes.InvalidArgument, "max_entries -1")
	_, _, err = listSnapshots("", -1)
	testkit.WantCode(t, err, codes.InvalidArgument, "max_entries -1")
}

func mustIDs(ids []string, _ string, _ error) []string { return ids }
