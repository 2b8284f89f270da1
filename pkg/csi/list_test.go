package csi_test

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/ids"
)

// errUnavailable is a storage system that is down.
var errUnavailable = status.Error(codes.Unavailable, "storage system is down")

// listCaps is an upstream that lists volumes and snapshots.
var listCaps = []csi.ControllerServiceCapability_RPC_Type{
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
	csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
	csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
}

// withVolumes makes the fake list volumes with these handles, each with
// the fake's own topology, which the proxy must replace.
func withVolumes(handles ...string) fakeOption {
	return func(f *fakeUpstream) {
		for _, h := range handles {
			f.listVolumes = append(f.listVolumes, &csi.ListVolumesResponse_Entry{
				Volume: &csi.Volume{VolumeId: h, CapacityBytes: 1 << 20, AccessibleTopology: upstreamTopology}})
		}
	}
}

// withVolumeEntries makes the fake list exactly these entries.
func withVolumeEntries(entries ...*csi.ListVolumesResponse_Entry) fakeOption {
	return func(f *fakeUpstream) { f.listVolumes = append(f.listVolumes, entries...) }
}

// withSnapshots makes the fake list snapshots "<handle>" of volume
// "<source>", given as handle, source pairs.
func withSnapshots(pairs ...string) fakeOption {
	return func(f *fakeUpstream) {
		for i := 0; i+1 < len(pairs); i += 2 {
			f.listSnapshots = append(f.listSnapshots, &csi.Snapshot{
				SnapshotId: pairs[i], SourceVolumeId: pairs[i+1], SizeBytes: 7, ReadyToUse: true})
		}
	}
}

// withPageSize makes the fake answer list calls in pages of at most n,
// whatever max_entries asks.
func withPageSize(n int) fakeOption {
	return func(f *fakeUpstream) { f.pageSize = n }
}

// zoneEntries offers a connection in one zone.
func zoneEntries(zone string) []accessible.Entry {
	return []accessible.Entry{{Requirements: map[string]string{"zone": zone}}}
}

// volumeIDs returns the volume IDs of entries, in order.
func volumeIDs(entries []*csi.ListVolumesResponse_Entry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.GetVolume().GetVolumeId())
	}
	return out
}

// listingProxy has five connections in name order: a (3 volumes, upstream
// pages of 2, zone z1), b (no volumes), c (1 volume, no topology list),
// d (4 volumes, pages of 1, zone z2 with an extra label) and e (an upstream
// without LIST_VOLUMES that would list a volume if asked).
func listingProxy(t *testing.T) (*testProxy, map[string]*fakeUpstream) {
	t.Helper()
	fakes := map[string]*fakeUpstream{
		"a": newFakeUpstream(t, withControllerCaps(listCaps...), withVolumes("a1", "a2", "a3"), withPageSize(2)),
		"b": newFakeUpstream(t, withControllerCaps(listCaps...)),
		"c": newFakeUpstream(t, withControllerCaps(listCaps...), withVolumes("c1")),
		"d": newFakeUpstream(t, withControllerCaps(listCaps...), withVolumes("d1", "d2", "d3", "d4"), withPageSize(1)),
		"e": newFakeUpstream(t, withControllerCaps(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME), withVolumes("e1")),
	}
	p := startProxy(t)
	p.add(t, "a", conn{Endpoint: fakes["a"].Endpoint, Topology: zoneEntries("z1")})
	p.add(t, "b", conn{Endpoint: fakes["b"].Endpoint})
	p.add(t, "c", conn{Endpoint: fakes["c"].Endpoint})
	p.add(t, "d", conn{Endpoint: fakes["d"].Endpoint, Topology: []accessible.Entry{
		{Requirements: map[string]string{"zone": "z2"}, Extra: map[string]string{"example.com/tier": "fast"}}}})
	p.add(t, "e", conn{Endpoint: fakes["e"].Endpoint})
	return p, fakes
}

// TestListVolumesPaging: every max_entries returns every volume exactly
// once, in connection-name order, with proxy IDs and the connection's
// topology instead of the upstream's.
func TestListVolumesPaging(t *testing.T) {
	z1 := []*csi.Topology{topo(testPrefix+"/zone", "z1")}
	z2 := []*csi.Topology{topo(testPrefix+"/zone", "z2", "example.com/tier", "fast")}
	vol := func(id string, topology []*csi.Topology) *csi.ListVolumesResponse_Entry {
		return &csi.ListVolumesResponse_Entry{Volume: &csi.Volume{VolumeId: id, CapacityBytes: 1 << 20, AccessibleTopology: topology}}
	}
	want := []*csi.ListVolumesResponse_Entry{
		vol("v:a/a1", z1), vol("v:a/a2", z1), vol("v:a/a3", z1),
		vol("v:c/c1", nil),
		vol("v:d/d1", z2), vol("v:d/d2", z2), vol("v:d/d3", z2), vol("v:d/d4", z2),
	}
	for _, max := range []int32{0, 1, 2, 3, 5, 8, 9, 100} {
		t.Run(fmt.Sprintf("max_entries=%d", max), func(t *testing.T) {
			p, fakes := listingProxy(t)
			pages := testkit.ListAllVolumes(callCtx(t), t, p.Controller, max)
			var got []*csi.ListVolumesResponse_Entry
			for _, page := range pages {
				got = append(got, page...)
			}
			if d := diff(want, got); d != "" {
				t.Errorf("entries over %d pages (-want +got):\n%s", len(pages), d)
			}
			if n := len(fakes["e"].requests("ListVolumes")); n != 0 {
				t.Errorf("upstream without LIST_VOLUMES was asked %d times", n)
			}
			// The upstream is asked for no more than the page has room
			// for, so it never lists what the proxy must then drop.
			for name, f := range fakes {
				for _, r := range f.requests("ListVolumes") {
					if m := r.(*csi.ListVolumesRequest).GetMaxEntries(); max > 0 && (m <= 0 || m > max) {
						t.Errorf("connection %s: upstream asked for max_entries %d in pages of %d", name, m, max)
					}
				}
			}
		})
	}
}

// TestListVolumesPagesCrossConnections pins the page layout for
// max_entries 2 and 3: pages fill up across connection boundaries and the
// upstream's own tokens are resumed.
func TestListVolumesPagesCrossConnections(t *testing.T) {
	tests := []struct {
		max  int32
		want [][]string
	}{
		{max: 2, want: [][]string{{"v:a/a1", "v:a/a2"}, {"v:a/a3", "v:c/c1"}, {"v:d/d1", "v:d/d2"}, {"v:d/d3", "v:d/d4"}, nil}},
		{max: 3, want: [][]string{{"v:a/a1", "v:a/a2", "v:a/a3"}, {"v:c/c1", "v:d/d1", "v:d/d2"}, {"v:d/d3", "v:d/d4"}}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("max_entries=%d", tt.max), func(t *testing.T) {
			p, fakes := listingProxy(t)
			var got [][]string
			for _, page := range testkit.ListAllVolumes(callCtx(t), t, p.Controller, tt.max) {
				got = append(got, volumeIDs(page))
			}
			if d := diff(tt.want, got); d != "" {
				t.Errorf("pages (-want +got):\n%s", d)
			}
			var tokens []string
			for _, r := range fakes["a"].requests("ListVolumes") {
				tokens = append(tokens, r.(*csi.ListVolumesRequest).GetStartingToken())
			}
			if d := diff([]string{"", "up-2"}, tokens); d != "" {
				t.Errorf("connection a's upstream tokens (-want +got):\n%s", d)
			}
		})
	}
}

// TestListVolumesBadToken: a token the proxy did not make, or one whose
// upstream part the upstream refuses, is ABORTED.
func TestListVolumesBadToken(t *testing.T) {
	enc := base64.RawURLEncoding.EncodeToString
	p, fakes := listingProxy(t)
	first, err := p.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	good := first.GetNextToken()
	if good == "" {
		t.Fatal("no next token after one of 8 volumes")
	}
	tests := map[string]string{
		"garbage":                 "not-a-token",
		"wrong version":           "pt0" + strings.TrimPrefix(good, "pt1"),
		"future version":          "pt2." + enc([]byte("a")) + "." + enc([]byte("up-1")),
		"too few parts":           "pt1." + enc([]byte("a")),
		"too many parts":          good + "." + enc([]byte("x")),
		"connection not base64":   "pt1.!!." + enc([]byte("up-1")),
		"upstream part corrupt":   "pt1." + enc([]byte("a")) + ".*",
		"truncated":               good[:len(good)-1],
		"invalid connection name": "pt1." + enc([]byte("../etc")) + "." + enc([]byte("up-1")),
		"empty connection name":   "pt1.." + enc([]byte("up-1")),
		"upstream refuses token":  "pt1." + enc([]byte("a")) + "." + enc([]byte("up-99")),
	}
	for name, tok := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := p.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{MaxEntries: 2, StartingToken: tok})
			testkit.WantCode(t, err, codes.Aborted)
		})
	}
	// The proxy's own token is made of the connection and the upstream's.
	if want := "pt1." + enc([]byte("a")) + "." + enc([]byte("up-1")); good != want {
		t.Errorf("token after a1 = %q, want %q", good, want)
	}
	if n := len(fakes["e"].requests("ListVolumes")); n != 0 {
		t.Errorf("upstream without LIST_VOLUMES was asked %d times", n)
	}
}

// TestListVolumesNegativeMax is the caller's mistake.
func TestListVolumesNegativeMax(t *testing.T) {
	p, fakes := listingProxy(t)
	_, err := p.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{MaxEntries: -1})
	testkit.WantCode(t, err, codes.InvalidArgument, "max_entries")
	for name, f := range fakes {
		if got := f.routed(); len(got) != 0 {
			t.Errorf("connection %s's upstream received %v", name, got)
		}
	}
}

// TestListVolumesConnectionRemoved: the connection a token names is gone
// by the next page; the listing goes on with the connections after it.
func TestListVolumesConnectionRemoved(t *testing.T) {
	tests := []struct {
		name   string
		max    int32
		first  []string // the page before the removal
		remove string
		rest   []string
	}{
		{name: "mid-connection", max: 2, first: []string{"v:a/a1", "v:a/a2"}, remove: "a",
			rest: []string{"v:c/c1", "v:d/d1", "v:d/d2", "v:d/d3", "v:d/d4"}},
		{name: "at a boundary", max: 4, first: []string{"v:a/a1", "v:a/a2", "v:a/a3", "v:c/c1"}, remove: "d"},
		{name: "the connection a boundary token names", max: 3, first: []string{"v:a/a1", "v:a/a2", "v:a/a3"}, remove: "b",
			rest: []string{"v:c/c1", "v:d/d1", "v:d/d2", "v:d/d3", "v:d/d4"}},
		{name: "a connection after the token", max: 3, first: []string{"v:a/a1", "v:a/a2", "v:a/a3"}, remove: "c",
			rest: []string{"v:d/d1", "v:d/d2", "v:d/d3", "v:d/d4"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := listingProxy(t)
			resp, err := p.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{MaxEntries: tt.max})
			if err != nil {
				t.Fatal(err)
			}
			if d := diff(tt.first, volumeIDs(resp.GetEntries())); d != "" {
				t.Fatalf("first page (-want +got):\n%s", d)
			}
			p.remove(t, tt.remove)
			rest, err := p.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{StartingToken: resp.GetNextToken()})
			if err != nil {
				t.Fatalf("after removing %s: %v", tt.remove, err)
			}
			if d := diff(tt.rest, volumeIDs(rest.GetEntries())); d != "" {
				t.Errorf("rest of the listing (-want +got):\n%s", d)
			}
		})
	}
}

// TestListVolumesBrokenConnection: a connection whose file does not load
// fails ListVolumes and ListSnapshots with FAILED_PRECONDITION naming it
// and the file's problem, as an unreachable upstream does: a list without
// its volumes would tell the external-attacher they are gone
// (docs/operations.md, "Listings"). Fixed, the listing is whole again.
func TestListVolumesBrokenConnection(t *testing.T) {
	p, fakes := listingProxy(t)
	p.write(t, "bb", "driver: csi\ncsi:\n  endpoint: [not, a, string]\n")
	p.write(t, "cc", "driver: nonsense\n")
	_, err := p.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{})
	testkit.WantCode(t, err, codes.FailedPrecondition, `ListVolumes: connection "bb" does not load`, "bb.yaml", "fix or remove its file")
	_, err = p.Controller.ListSnapshots(callCtx(t), &csi.ListSnapshotsRequest{})
	testkit.WantCode(t, err, codes.FailedPrecondition, `ListSnapshots: connection "bb" does not load`, "bb.yaml")
	// Paged: the pages before it are served; the page that would hold its
	// volumes fails.
	resp, err := p.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{MaxEntries: 3})
	if err != nil {
		t.Fatal(err)
	}
	if d := diff([]string{"v:a/a1", "v:a/a2", "v:a/a3"}, volumeIDs(resp.GetEntries())); d != "" {
		t.Errorf("first page (-want +got):\n%s", d)
	}
	_, err = p.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{MaxEntries: 3, StartingToken: resp.GetNextToken()})
	testkit.WantCode(t, err, codes.FailedPrecondition, `connection "bb" does not load`)
	p.remove(t, "bb")
	_, err = p.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{})
	testkit.WantCode(t, err, codes.FailedPrecondition, `connection "cc" does not load`, "cc.yaml")
	p.add(t, "cc", conn{Endpoint: fakes["c"].Endpoint})
	var got []string
	for _, page := range testkit.ListAllVolumes(callCtx(t), t, p.Controller, 3) {
		got = append(got, volumeIDs(page)...)
	}
	want := []string{"v:a/a1", "v:a/a2", "v:a/a3", "v:c/c1", "v:cc/c1", "v:d/d1", "v:d/d2", "v:d/d3", "v:d/d4"}
	if d := diff(want, got); d != "" {
		t.Errorf("volumes (-want +got):\n%s", d)
	}
}

// TestListVolumesSharedEndpoint: two connections to one upstream list its
// volumes under each of them (a PV made through either carries that one's
// ID, and consumers look it up in the list), with each connection's
// topology, on every page size.
func TestListVolumesSharedEndpoint(t *testing.T) {
	for _, max := range []int32{0, 1, 2} {
		t.Run(fmt.Sprintf("max_entries=%d", max), func(t *testing.T) {
			shared := newFakeUpstream(t, withControllerCaps(listCaps...), withVolumes("s1", "s2"))
			other := newFakeUpstream(t, withControllerCaps(listCaps...), withVolumes("o1"))
			p := startProxy(t)
			p.add(t, "x", conn{Endpoint: shared.Endpoint})
			p.add(t, "y", conn{Endpoint: other.Endpoint})
			p.add(t, "z", conn{Endpoint: shared.Endpoint, Topology: zoneEntries("z1")})
			var got []string
			for _, page := range testkit.ListAllVolumes(callCtx(t), t, p.Controller, max) {
				got = append(got, volumeIDs(page)...)
			}
			if d := diff([]string{"v:x/s1", "v:x/s2", "v:y/o1", "v:z/s1", "v:z/s2"}, got); d != "" {
				t.Errorf("volumes (-want +got):\n%s", d)
			}
		})
	}
}

// TestListVolumesEntries: published node ids go back through the node id
// template, content sources get proxy IDs, and a volume whose proxy ID
// could not be parsed back (a handle over ids.MaxHandle) is left out
// (logged) rather than returned broken.
func TestListVolumesEntries(t *testing.T) {
	long := strings.Repeat("h", ids.MaxHandle+1)
	f := newFakeUpstream(t, withControllerCaps(listCaps...), withVolumeEntries(
		&csi.ListVolumesResponse_Entry{
			Volume: &csi.Volume{VolumeId: "vol-1", AccessibleTopology: upstreamTopology,
				ContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
					Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: "snap-0"}}}},
			Status: &csi.ListVolumesResponse_VolumeStatus{
				PublishedNodeIds: []string{"iqn.2000-01.com.example:node-1", "iqn.2000-01.com.example:node-2", "some-other-shape"},
			},
		},
		&csi.ListVolumesResponse_Entry{Volume: &csi.Volume{VolumeId: long}},
		&csi.ListVolumesResponse_Entry{Volume: &csi.Volume{VolumeId: "vol-2",
			ContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
				Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: "vol-1"}}}}},
	))
	p := startProxy(t)
	p.addWithNodeID(t, "a", f.Endpoint, "iqn.2000-01.com.example:{nodeName}")
	resp, err := p.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := &csi.ListVolumesResponse{Entries: []*csi.ListVolumesResponse_Entry{
		{
			Volume: &csi.Volume{VolumeId: "v:a/vol-1",
				ContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
					Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: "s:a/snap-0"}}}},
			Status: &csi.ListVolumesResponse_VolumeStatus{
				PublishedNodeIds: []string{"node-1", "node-2", "some-other-shape"},
			},
		},
		{Volume: &csi.Volume{VolumeId: "v:a/vol-2",
			ContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
				Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: "v:a/vol-1"}}}}},
	}}
	if d := diff(want, resp); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if !strings.Contains(p.Logs.String(), "cannot get a proxy id") {
		t.Errorf("the left-out volume is not logged:\n%s", p.Logs.String())
	}
}

// TestListVolumesUpstreamFails: a failing upstream fails the listing with
// its code and the connection's name; a shortened list would read as
// "these volumes are gone".
func TestListVolumesUpstreamFails(t *testing.T) {
	p, fakes := listingProxy(t)
	fakes["c"].setErr("ListVolumes", errUnavailable)
	_, err := p.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{})
	testkit.WantCode(t, err, codes.Unavailable, `"c"`)
}

// TestControllerListVolumeHealth fans out like ListVolumes, with proxy IDs.
func TestControllerListVolumeHealth(t *testing.T) {
	healthCaps := withControllerCaps(csi.ControllerServiceCapability_RPC_LIST_VOLUME_HEALTH, csi.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH)
	fa := newFakeUpstream(t, healthCaps)
	fa.setResponse("ControllerListVolumeHealth", &csi.ControllerListVolumeHealthResponse{Entries: []*csi.VolumeHealth{
		{VolumeId: "vol-1"}, {VolumeId: "vol-2", HealthStatuses: []*csi.VolumeHealth_VolumeHealthEntry{{Message: "slow"}}}}})
	fb := newFakeUpstream(t) // no LIST_VOLUME_HEALTH: skipped
	p := startProxy(t)
	p.add(t, "a", conn{Endpoint: fa.Endpoint, Secrets: map[string]string{"user": "conn-user"}})
	p.add(t, "b", conn{Endpoint: fb.Endpoint})
	resp, err := p.Controller.ControllerListVolumeHealth(callCtx(t), &csi.ControllerListVolumeHealthRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := &csi.ControllerListVolumeHealthResponse{Entries: []*csi.VolumeHealth{
		{VolumeId: "v:a/vol-1"}, {VolumeId: "v:a/vol-2", HealthStatuses: []*csi.VolumeHealth_VolumeHealthEntry{{Message: "slow"}}}}}
	if d := diff(want, resp); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if d := diff(&csi.ControllerListVolumeHealthRequest{Secrets: map[string]string{"user": "conn-user"}},
		only[*csi.ControllerListVolumeHealthRequest](t, fa, "ControllerListVolumeHealth")); d != "" {
		t.Errorf("upstream request (-want +got):\n%s", d)
	}
	if got := fb.routed(); len(got) != 0 {
		t.Errorf("upstream without LIST_VOLUME_HEALTH received %v", got)
	}
}

// TestListVolumesBuildsNothingForEarlierPages: a listing resumed from a
// token builds no client for the connections of the pages already served
// (the defect built one for every connection before skipping it). A fresh
// proxy, with the same connection files, takes the token the first one
// gave at connection d: a, b and c get no client and no call.
func TestListVolumesBuildsNothingForEarlierPages(t *testing.T) {
	first, _ := listingProxy(t)
	token := ""
	for range 10 {
		resp, err := first.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{MaxEntries: 1, StartingToken: token})
		if err != nil {
			t.Fatal(err)
		}
		token = resp.GetNextToken()
		if ids := volumeIDs(resp.GetEntries()); len(ids) == 1 && ids[0] == "v:d/d1" {
			break
		}
	}
	if token == "" {
		t.Fatal("no page ended at v:d/d1 with a next token")
	}
	p, fakes := listingProxy(t)
	resp, err := p.Controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{StartingToken: token})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := volumeIDs(resp.GetEntries()), []string{"v:d/d2", "v:d/d3", "v:d/d4"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("resumed listing = %v, want %v", got, want)
	}
	for _, name := range []string{"a", "b", "c"} {
		f := fakes[name]
		f.mu.Lock()
		n := len(f.calls)
		f.mu.Unlock()
		if n != 0 {
			t.Errorf("connection %s, listed on earlier pages, received %d calls", name, n)
		}
	}
	if n := p.Pool.Len(); n > 2 {
		t.Errorf("%d upstream clients after a listing resumed at d, want at most 2 (d and e)", n)
	}
}
