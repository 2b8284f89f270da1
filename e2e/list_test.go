package e2e

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

// The listing setup's connections, in name order: two csi connections to
// standalone local-hostpath upstreams and one built-in local-hostpath.
const (
	connPublish = "csi-a" // upstream with controllerPublish, node id template, zone1
	connPlain   = "csi-b" // upstream without controllerPublish, zone2 + extra label
	connLocal   = "local" // built in, no topology list: node-local
)

var listConnections = []string{connPublish, connPlain, connLocal}

// iqnPrefix + node name is what csi-a's upstream calls a node.
const iqnPrefix = "iqn.2000-01.com.example:"

// listing is one proxy controller (controllerPublish on) in front of three
// connections, with the volumes and snapshots made through it.
type listing struct {
	dir, connDir string
	files        map[string]string // connection file contents
	proxy        csi.ControllerClient
	// upstreamA is csi-a's upstream, asked directly.
	upstreamA csi.ControllerClient
	// volumes and snapshots are proxy IDs per connection, sorted as the
	// upstream lists them (by its own ID).
	volumes, snapshots map[string][]string
	// sources maps a proxy snapshot ID to its source's proxy volume ID.
	sources map[string]string
	// topology is each connection's accessible_topology.
	topology map[string][]*csi.Topology
}

func startListing(t *testing.T) *listing {
	t.Helper()
	dir := newTestDir(t)
	l := &listing{
		dir: dir, connDir: filepath.Join(dir, "connections"), files: map[string]string{},
		volumes: map[string][]string{}, snapshots: map[string][]string{}, sources: map[string]string{},
		topology: map[string][]*csi.Topology{connPublish: offeredZ1, connPlain: offeredZ2,
			// Node-local (SPEC §12): listed pinned to the node of the
			// controller that holds it.
			connLocal: {{Segments: map[string]string{prefix + "/node": "list-controller"}}}},
	}
	config := func(name, content string) string {
		p := filepath.Join(dir, "config", name+".yaml")
		testkit.WriteFile(t, p, content, 0o640)
		return p
	}
	// csi-a's upstream is node A's local-hostpath: it knows only its own
	// node id, the one the connection's template renders for node A.
	upA := launch(t, dir, processSpec{name: "list-upstream-a", mode: "all", nodeID: iqnPrefix + nodeA,
		config: config("list-upstream-a", upstreamConfig(filepath.Join(dir, "storage", "a"), false)+"  controllerPublish: true\n")})
	upB := launch(t, dir, processSpec{name: "list-upstream-b", mode: "all", nodeID: "list-upstream-b",
		config: config("list-upstream-b", upstreamConfig(filepath.Join(dir, "storage", "b"), false))})
	l.files[connPublish] = csiConnection("unix://"+upA.sock, "zone1", nil) + "    nodeId:\n      template: \"" + iqnPrefix + "{nodeName}\"\n"
	l.files[connPlain] = csiConnection("unix://"+upB.sock, "zone2", map[string]string{extraKey: extraValue})
	l.files[connLocal] = fmt.Sprintf("driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\n", filepath.Join(dir, "storage", "local"))
	for _, name := range listConnections {
		l.restore(t, name)
	}
	ctrl := launch(t, dir, processSpec{name: "list-controller", mode: "controller", nodeID: "list-controller",
		config: config("list-controller", proxyConfig(l.connDir, filepath.Join(dir, "hosts", "controller"))+"  controllerPublish: true\n")})
	for _, p := range []*process{upA, upB, ctrl} {
		p.waitReady(t)
	}
	l.proxy = csi.NewControllerClient(ctrl.conn)
	l.upstreamA = csi.NewControllerClient(upA.conn)

	// 7 volumes: 3, 2 and 2; 5 snapshots: 2, 1 and 2.
	volumes := map[string]int{connPublish: 3, connPlain: 2, connLocal: 2}
	// Snapshots by index of their source volume in creation order.
	snapshots := map[string][]int{connPublish: {0, 1}, connPlain: {0}, connLocal: {1, 1}}
	for _, conn := range listConnections {
		for i := range volumes[conn] {
			resp, err := l.proxy.CreateVolume(callCtx(t), createRequest(fmt.Sprintf("list-%s-%d", conn, i), conn, nil))
			if err != nil {
				t.Fatalf("CreateVolume on %s: %v", conn, err)
			}
			l.volumes[conn] = append(l.volumes[conn], resp.GetVolume().GetVolumeId())
		}
		for i, src := range snapshots[conn] {
			resp, err := l.proxy.CreateSnapshot(callCtx(t), &csi.CreateSnapshotRequest{
				Name: fmt.Sprintf("list-%s-snap-%d", conn, i), SourceVolumeId: l.volumes[conn][src]})
			if err != nil {
				t.Fatalf("CreateSnapshot on %s: %v", conn, err)
			}
			id := resp.GetSnapshot().GetSnapshotId()
			l.snapshots[conn] = append(l.snapshots[conn], id)
			l.sources[id] = l.volumes[conn][src]
		}
		slices.Sort(l.volumes[conn])
		slices.Sort(l.snapshots[conn])
	}
	return l
}

// restore (re)writes a connection's file.
func (l *listing) restore(t *testing.T, conn string) {
	t.Helper()
	testkit.WriteFile(t, filepath.Join(l.connDir, conn+".yaml"), l.files[conn], 0o640)
}

// allVolumes is what a listing must return: every volume, connections in
// name order, each with its connection's topology.
func (l *listing) allVolumes(except ...string) []listedVolume {
	var out []listedVolume
	for _, conn := range listConnections {
		if slices.Contains(except, conn) {
			continue
		}
		for _, id := range l.volumes[conn] {
			out = append(out, listedVolume{ID: id, Topology: l.topology[conn]})
		}
	}
	return out
}

// listedVolume is what a ListVolumes entry must get right.
type listedVolume struct {
	ID       string
	Topology []*csi.Topology
}

// listVolumes pages through ListVolumes from token, checking page sizes.
func (l *listing) listVolumes(t *testing.T, maxEntries int32, token string) []listedVolume {
	t.Helper()
	var out []listedVolume
	for page := 1; ; page++ {
		if page > 30 {
			t.Fatalf("max_entries %d: more than 30 pages (last token %q)", maxEntries, token)
		}
		resp, err := l.proxy.ListVolumes(callCtx(t), &csi.ListVolumesRequest{MaxEntries: maxEntries, StartingToken: token})
		if err != nil {
			t.Fatalf("max_entries %d, page %d: %v", maxEntries, page, err)
		}
		if maxEntries > 0 && len(resp.GetEntries()) > int(maxEntries) {
			t.Errorf("max_entries %d: page %d has %d entries", maxEntries, page, len(resp.GetEntries()))
		}
		for _, e := range resp.GetEntries() {
			out = append(out, listedVolume{ID: e.GetVolume().GetVolumeId(), Topology: e.GetVolume().GetAccessibleTopology()})
		}
		if token = resp.GetNextToken(); token == "" {
			return out
		}
	}
}

// listSnapshots pages through ListSnapshots, returning snapshot ID →
// source volume ID in listing order.
func (l *listing) listSnapshots(t *testing.T, req *csi.ListSnapshotsRequest) [][2]string {
	t.Helper()
	var out [][2]string
	for page := 1; ; page++ {
		if page > 30 {
			t.Fatalf("more than 30 pages (last token %q)", req.GetStartingToken())
		}
		resp, err := l.proxy.ListSnapshots(callCtx(t), req)
		if err != nil {
			t.Fatalf("ListSnapshots %v, page %d: %v", req, page, err)
		}
		if max := req.GetMaxEntries(); max > 0 && len(resp.GetEntries()) > int(max) {
			t.Errorf("max_entries %d: page %d has %d entries", max, page, len(resp.GetEntries()))
		}
		for _, e := range resp.GetEntries() {
			out = append(out, [2]string{e.GetSnapshot().GetSnapshotId(), e.GetSnapshot().GetSourceVolumeId()})
		}
		if resp.GetNextToken() == "" {
			return out
		}
		req.StartingToken = resp.GetNextToken()
	}
}

// withoutSnapshots is a volume of conn that no snapshot was made of.
func (l *listing) withoutSnapshots(t *testing.T, conn string) string {
	t.Helper()
	for _, id := range l.volumes[conn] {
		if !slices.ContainsFunc(l.snapshots[conn], func(s string) bool { return l.sources[s] == id }) {
			return id
		}
	}
	t.Fatalf("every volume of %s has a snapshot", conn)
	return ""
}

// snapshotsOf is the expected snapshot listing of some connections.
func (l *listing) snapshotsOf(conns ...string) [][2]string {
	var out [][2]string
	for _, conn := range conns {
		for _, id := range l.snapshots[conn] {
			out = append(out, [2]string{id, l.sources[id]})
		}
	}
	return out
}

func diff(want, got any) string { return cmp.Diff(want, got, protocmp.Transform()) }

// TestListingAcrossConnections: ListVolumes and ListSnapshots over two csi
// upstreams and a built-in one, page by page, with bad tokens and a
// connection removed mid-listing.
func TestListingAcrossConnections(t *testing.T) {
	l := startListing(t)

	t.Run("ListVolumes", func(t *testing.T) {
		want := l.allVolumes()
		if len(want) != 7 {
			t.Fatalf("made %d volumes, want 7", len(want))
		}
		for _, max := range []int32{1, 2, 3, 0} {
			if d := diff(want, l.listVolumes(t, max, "")); d != "" {
				t.Errorf("max_entries %d (-want +got):\n%s", max, d)
			}
		}
	})

	t.Run("ListSnapshots", func(t *testing.T) {
		want := l.snapshotsOf(listConnections...)
		if len(want) != 5 {
			t.Fatalf("made %d snapshots, want 5", len(want))
		}
		for _, max := range []int32{1, 2, 3, 0} {
			if d := diff(want, l.listSnapshots(t, &csi.ListSnapshotsRequest{MaxEntries: max})); d != "" {
				t.Errorf("max_entries %d (-want +got):\n%s", max, d)
			}
		}
		local := l.snapshots[connLocal]
		filters := []struct {
			name string
			req  *csi.ListSnapshotsRequest
			want [][2]string
		}{
			{name: "snapshot_id", req: &csi.ListSnapshotsRequest{SnapshotId: local[1]}, want: [][2]string{{local[1], l.sources[local[1]]}}},
			{name: "source_volume_id", req: &csi.ListSnapshotsRequest{SourceVolumeId: l.sources[local[0]]}, want: l.snapshotsOf(connLocal)},
			{name: "source_volume_id, one per page", req: &csi.ListSnapshotsRequest{SourceVolumeId: l.sources[local[0]], MaxEntries: 1}, want: l.snapshotsOf(connLocal)},
			{name: "source volume without snapshots", req: &csi.ListSnapshotsRequest{SourceVolumeId: l.withoutSnapshots(t, connPlain)}},
			{name: "both filters", req: &csi.ListSnapshotsRequest{SnapshotId: l.snapshots[connPlain][0], SourceVolumeId: l.sources[l.snapshots[connPlain][0]]},
				want: l.snapshotsOf(connPlain)},
			{name: "filters naming two connections", req: &csi.ListSnapshotsRequest{SnapshotId: local[0], SourceVolumeId: l.volumes[connPublish][0]}},
			{name: "malformed snapshot_id", req: &csi.ListSnapshotsRequest{SnapshotId: strings.TrimPrefix(local[0], "s:")}},
			{name: "snapshot that does not exist", req: &csi.ListSnapshotsRequest{SnapshotId: "s:" + connLocal + "/no-such-snapshot"}},
		}
		for _, f := range filters {
			if d := diff(f.want, l.listSnapshots(t, f.req)); d != "" {
				t.Errorf("%s (-want +got):\n%s", f.name, d)
			}
		}
	})

	t.Run("bad tokens", func(t *testing.T) {
		first, err := l.proxy.ListVolumes(callCtx(t), &csi.ListVolumesRequest{MaxEntries: 1})
		if err != nil {
			t.Fatal(err)
		}
		good := first.GetNextToken()
		parts := strings.Split(good, ".")
		if len(parts) != 3 {
			t.Fatalf("token %q is not <version>.<connection>.<upstream token>", good)
		}
		enc := base64.RawURLEncoding.EncodeToString
		tokens := map[string]string{
			"garbage":                  "garbage",
			"other version":            "pt9." + parts[1] + "." + parts[2],
			"truncated":                good[:len(good)-3],
			"upstream token tampered":  parts[0] + "." + parts[1] + "." + enc([]byte("not-a-volume-id")),
			"connection name tampered": parts[0] + "." + enc([]byte("../"+connPublish)) + "." + parts[2],
			"connection part not b64":  parts[0] + ".%%%." + parts[2],
		}
		wantAborted := func(what string, err error) {
			t.Helper()
			if st, _ := status.FromError(err); st.Code() != codes.Aborted {
				t.Errorf("%s: got %v %q, want ABORTED", what, st.Code(), st.Message())
			}
		}
		for name, tok := range tokens {
			_, err := l.proxy.ListVolumes(callCtx(t), &csi.ListVolumesRequest{MaxEntries: 1, StartingToken: tok})
			wantAborted("ListVolumes, "+name, err)
		}
		_, err = l.proxy.ListSnapshots(callCtx(t), &csi.ListSnapshotsRequest{StartingToken: "pt9." + parts[1] + "." + parts[2]})
		wantAborted("ListSnapshots, other version", err)
		// The good token still works after all that.
		if d := diff(l.allVolumes()[1:], l.listVolumes(t, 1, good)); d != "" {
			t.Errorf("resumed listing (-want +got):\n%s", d)
		}
	})

	t.Run("connection removed mid-listing", func(t *testing.T) {
		for _, removed := range []string{connPublish, connPlain} {
			// Page 1 stops inside csi-a, whose token then names it.
			first, err := l.proxy.ListVolumes(callCtx(t), &csi.ListVolumesRequest{MaxEntries: 2})
			if err != nil {
				t.Fatal(err)
			}
			all := l.allVolumes()
			var firstPage []listedVolume
			for _, e := range first.GetEntries() {
				firstPage = append(firstPage, listedVolume{ID: e.GetVolume().GetVolumeId(), Topology: e.GetVolume().GetAccessibleTopology()})
			}
			if d := diff(all[:2], firstPage); d != "" {
				t.Fatalf("first page is not csi-a's first two volumes (-want +got):\n%s", d)
			}
			if err := os.Remove(filepath.Join(l.connDir, removed+".yaml")); err != nil {
				t.Fatal(err)
			}
			got := l.listVolumes(t, 2, first.GetNextToken())
			l.restore(t, removed)
			var want []listedVolume
			for _, v := range all[2:] {
				if !strings.HasPrefix(v.ID, "v:"+removed+"/") {
					want = append(want, v)
				}
			}
			if d := diff(want, got); d != "" {
				t.Errorf("%s removed after page 1: rest of the listing (-want +got):\n%s", removed, d)
			}
		}
		if d := diff(l.allVolumes(), l.listVolumes(t, 0, "")); d != "" {
			t.Errorf("after restoring the files (-want +got):\n%s", d)
		}
	})

	t.Run("clean up through the proxy", func(t *testing.T) {
		for _, conn := range listConnections {
			for _, id := range l.snapshots[conn] {
				if _, err := l.proxy.DeleteSnapshot(callCtx(t), &csi.DeleteSnapshotRequest{SnapshotId: id}); err != nil {
					t.Errorf("DeleteSnapshot %s: %v", id, err)
				}
			}
			for _, id := range l.volumes[conn] {
				if _, err := l.proxy.DeleteVolume(callCtx(t), &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
					t.Errorf("DeleteVolume %s: %v", id, err)
				}
			}
		}
		if got := l.listVolumes(t, 0, ""); len(got) != 0 {
			t.Errorf("volumes left: %v", got)
		}
		if got := l.listSnapshots(t, &csi.ListSnapshotsRequest{}); len(got) != 0 {
			t.Errorf("snapshots left: %v", got)
		}
	})
}

// TestControllerPublishRoundTrip: ControllerPublish through the proxy to a
// standalone local-hostpath that records attachments, with the node id
// translated by the connection's template on the way in and back.
func TestControllerPublishRoundTrip(t *testing.T) {
	l := startListing(t)
	vol := l.volumes[connPublish][0]
	handle := strings.TrimPrefix(vol, "v:"+connPublish+"/")
	upstreamNode := iqnPrefix + nodeA

	publishedOn := func(t *testing.T) (upstream, proxied []string) {
		t.Helper()
		resp, err := l.upstreamA.ListVolumes(callCtx(t), &csi.ListVolumesRequest{})
		if err != nil {
			t.Fatalf("upstream ListVolumes: %v", err)
		}
		for _, e := range resp.GetEntries() {
			if e.GetVolume().GetVolumeId() == handle {
				upstream = e.GetStatus().GetPublishedNodeIds()
			}
		}
		presp, err := l.proxy.ListVolumes(callCtx(t), &csi.ListVolumesRequest{})
		if err != nil {
			t.Fatalf("proxy ListVolumes: %v", err)
		}
		for _, e := range presp.GetEntries() {
			if e.GetVolume().GetVolumeId() == vol {
				proxied = e.GetStatus().GetPublishedNodeIds()
			}
		}
		return upstream, proxied
	}

	resp, err := l.proxy.ControllerPublishVolume(callCtx(t), &csi.ControllerPublishVolumeRequest{
		VolumeId: vol, NodeId: nodeA, VolumeCapability: mountCapability()})
	if err != nil {
		t.Fatalf("ControllerPublishVolume: %v", err)
	}
	// local-hostpath tells the node plugin which node it attached to.
	if d := diff(map[string]string{"attachedTo": upstreamNode}, resp.GetPublishContext()); d != "" {
		t.Errorf("publish_context (-want +got):\n%s", d)
	}
	up, proxied := publishedOn(t)
	if d := diff([]string{upstreamNode}, up); d != "" {
		t.Errorf("attachment recorded upstream (-want +got):\n%s", d)
	}
	if d := diff([]string{nodeA}, proxied); d != "" {
		t.Errorf("published_node_ids through the proxy (-want +got):\n%s", d)
	}

	// Publishing again is idempotent; a node the upstream does not know
	// is NOT_FOUND, and the refusal names the connection and the node id
	// the template rendered.
	if _, err := l.proxy.ControllerPublishVolume(callCtx(t), &csi.ControllerPublishVolumeRequest{
		VolumeId: vol, NodeId: nodeA, VolumeCapability: mountCapability()}); err != nil {
		t.Errorf("publish again: %v", err)
	}
	_, err = l.proxy.ControllerPublishVolume(callCtx(t), &csi.ControllerPublishVolumeRequest{
		VolumeId: vol, NodeId: nodeB, VolumeCapability: mountCapability()})
	if st, _ := status.FromError(err); st.Code() != codes.NotFound || !strings.Contains(st.Message(), connPublish) ||
		!strings.Contains(st.Message(), iqnPrefix+nodeB) {
		t.Errorf("publish to an unknown node: got %v %q, want NOT_FOUND naming %s and %s", st.Code(), st.Message(), connPublish, iqnPrefix+nodeB)
	}

	// A node name whose translated id would pass 256 bytes never reaches
	// the upstream.
	long := strings.Repeat("n", 256-len(iqnPrefix)+1)
	_, err = l.proxy.ControllerPublishVolume(callCtx(t), &csi.ControllerPublishVolumeRequest{
		VolumeId: vol, NodeId: long, VolumeCapability: mountCapability()})
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), connPublish) {
		t.Errorf("node id over 256 bytes: got %v %q, want INVALID_ARGUMENT naming %s", st.Code(), st.Message(), connPublish)
	}

	if _, err := l.proxy.ControllerUnpublishVolume(callCtx(t), &csi.ControllerUnpublishVolumeRequest{VolumeId: vol, NodeId: nodeA}); err != nil {
		t.Fatalf("ControllerUnpublishVolume: %v", err)
	}
	if up, proxied := publishedOn(t); len(up) != 0 || len(proxied) != 0 {
		t.Errorf("after unpublish: upstream %v, proxy %v; want none", up, proxied)
	}

	// An upstream without controller publishing needs no attach step.
	for _, conn := range []string{connPlain, connLocal} {
		resp, err := l.proxy.ControllerPublishVolume(callCtx(t), &csi.ControllerPublishVolumeRequest{
			VolumeId: l.volumes[conn][0], NodeId: nodeA, VolumeCapability: mountCapability()})
		if err != nil || len(resp.GetPublishContext()) != 0 {
			t.Errorf("%s: publish = %v, %v; want success with no context", conn, resp, err)
		}
		if _, err := l.proxy.ControllerUnpublishVolume(callCtx(t), &csi.ControllerUnpublishVolumeRequest{
			VolumeId: l.volumes[conn][0], NodeId: nodeA}); err != nil {
			t.Errorf("%s: unpublish: %v", conn, err)
		}
	}
}
