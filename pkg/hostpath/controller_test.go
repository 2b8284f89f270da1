package hostpath

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

func TestCreateVolumeIdempotency(t *testing.T) {
	ctx := context.Background()
	d := newTestDriver(t, Options{})
	first, err := d.CreateVolume(ctx, createReq("pvc-1", 10<<20))
	if err != nil {
		t.Fatal(err)
	}
	want := &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: handleFor(d, "pvc-1"), CapacityBytes: 10 << 20}}
	if diff := cmp.Diff(want, first, protocmp.Transform()); diff != "" {
		t.Fatalf("first CreateVolume (-want +got):\n%s", diff)
	}
	// The CO may write before a retry; a retry must not reset the data.
	testkit.WriteFile(t, d.store.volumePath(volumeIDOf(first.Volume.VolumeId))+"/keep", "data", 0o644)

	tests := []struct {
		name string
		req  *csi.CreateVolumeRequest
		code codes.Code
		msg  string
	}{
		{"same request", createReq("pvc-1", 10<<20), codes.OK, ""},
		{"smaller required fits", createReq("pvc-1", 1<<20), codes.OK, ""},
		{"no capacity range fits", createReq("pvc-1", 0), codes.OK, ""},
		{"limit above size fits", &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: []*csi.VolumeCapability{rwo},
			CapacityRange: &csi.CapacityRange{RequiredBytes: 10 << 20, LimitBytes: 20 << 20}}, codes.OK, ""},
		{"other capabilities", &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: []*csi.VolumeCapability{
			testkit.MountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER)}}, codes.OK, ""},
		{"larger required", createReq("pvc-1", 20<<20), codes.AlreadyExists, "10485760 bytes"},
		{"limit below size", &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: []*csi.VolumeCapability{rwo},
			CapacityRange: &csi.CapacityRange{LimitBytes: 5 << 20}}, codes.AlreadyExists, "limit_bytes=5242880"},
		{"now with a source", &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: []*csi.VolumeCapability{rwo},
			VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
				Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: volumeIDFor("other")}}}}, codes.AlreadyExists, "from no content source"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := d.CreateVolume(ctx, tc.req)
			if tc.code != codes.OK {
				testkit.WantCode(t, err, tc.code, tc.msg)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, resp, protocmp.Transform()); diff != "" {
				t.Errorf("retry (-want +got):\n%s", diff)
			}
		})
	}
	if got := readFile(t, d.store.volumePath(volumeIDOf(first.Volume.VolumeId))+"/keep"); got != "data" {
		t.Errorf("data after retries = %q", got)
	}
}

func TestCreateVolumeConcurrentSameName(t *testing.T) {
	d := newTestDriver(t, Options{})
	var wg sync.WaitGroup
	ids := make([]string, 8)
	errs := make([]error, 8)
	for i := range ids {
		wg.Go(func() {
			resp, err := d.CreateVolume(context.Background(), createReq("race", 0))
			ids[i], errs[i] = resp.GetVolume().GetVolumeId(), err
		})
	}
	wg.Wait()
	for i := range ids {
		if errs[i] != nil || ids[i] != ids[0] {
			t.Errorf("call %d: id %q, error %v; want %q", i, ids[i], errs[i], ids[0])
		}
	}
	recs, err := d.store.listVolumes()
	if err != nil || len(recs) != 1 {
		t.Errorf("records after the race: %d (%v), want 1", len(recs), err)
	}
}

func TestCreateVolumeValidation(t *testing.T) {
	d := newTestDriver(t, Options{})
	multi := testkit.MountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)
	tests := []struct {
		name string
		req  *csi.CreateVolumeRequest
		code codes.Code
		msg  string
	}{
		{"no name", &csi.CreateVolumeRequest{VolumeCapabilities: []*csi.VolumeCapability{rwo}}, codes.InvalidArgument, "name is required"},
		{"no capabilities", &csi.CreateVolumeRequest{Name: "v"}, codes.InvalidArgument, "volume_capabilities is required"},
		{"nil capability", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{nil}}, codes.InvalidArgument, "volume_capabilities[0] is empty"},
		{"block", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{blockCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}},
			codes.InvalidArgument, "local-hostpath does not support block volumes"},
		{"multi-node", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rwo, multi}},
			codes.InvalidArgument, "volume_capabilities[1].access_mode MULTI_NODE_MULTI_WRITER is not supported: local-hostpath volumes are node-local"},
		{"no access mode", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}}}, codes.InvalidArgument, "access_mode is required"},
		{"unknown mount flag", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{
			testkit.MountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "discard")}}, codes.InvalidArgument, `"discard"`},
		{"mutable parameters", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rwo},
			MutableParameters: map[string]string{"iops": "1"}}, codes.InvalidArgument, "mutable_parameters"},
		{"negative required", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rwo},
			CapacityRange: &csi.CapacityRange{RequiredBytes: -1}}, codes.InvalidArgument, "required_bytes -1"},
		{"negative limit", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rwo},
			CapacityRange: &csi.CapacityRange{LimitBytes: -1}}, codes.InvalidArgument, "limit_bytes -1"},
		{"limit below required", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rwo},
			CapacityRange: &csi.CapacityRange{RequiredBytes: 2, LimitBytes: 1}}, codes.InvalidArgument, "limit_bytes 1 is smaller than required_bytes 2"},
		{"empty content source", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rwo},
			VolumeContentSource: &csi.VolumeContentSource{}}, codes.InvalidArgument, "volume_content_source"},
		{"empty snapshot id", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rwo},
			VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{}}}},
			codes.InvalidArgument, "snapshot_id is required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.CreateVolume(context.Background(), tc.req)
			testkit.WantCode(t, err, tc.code, tc.msg)
		})
	}
	if recs, _ := d.store.listVolumes(); len(recs) != 0 {
		t.Errorf("invalid requests created %d volumes", len(recs))
	}
}

func TestCreateVolumeCapacity(t *testing.T) {
	d := newTestDriver(t, Options{})
	tests := []struct {
		name string
		cr   *csi.CapacityRange
		want int64
	}{
		{"unset: default 1 GiB", nil, 1 << 30},
		{"zero range: default", &csi.CapacityRange{}, 1 << 30},
		{"required", &csi.CapacityRange{RequiredBytes: 5 << 20}, 5 << 20},
		{"required equals limit", &csi.CapacityRange{RequiredBytes: 7, LimitBytes: 7}, 7},
		{"limit below default", &csi.CapacityRange{LimitBytes: 100 << 20}, 100 << 20},
		{"limit above default", &csi.CapacityRange{LimitBytes: 4 << 30}, 1 << 30},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := d.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
				Name: "cap-" + tc.name, VolumeCapabilities: []*csi.VolumeCapability{rwo}, CapacityRange: tc.cr})
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.GetVolume().GetCapacityBytes(); got != tc.want {
				t.Errorf("capacity = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestCreateVolumeLayout(t *testing.T) {
	d := newTestDriver(t, Options{})
	id := mustCreate(t, d, createReq("layout", 0))
	// An empty volume is its journal entry: the directory is made at
	// first use.
	if _, err := os.Lstat(d.store.volumePath(volumeIDOf(id))); !os.IsNotExist(err) {
		t.Errorf("volume directory made at create: %v", err)
	}
	rec, err := d.store.readVolume(volumeIDOf(id))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Name != "layout" || rec.handle() != id || rec.CreatedAt.IsZero() || !rec.DataOnFirstUse {
		t.Errorf("record = %+v", rec)
	}
	dir, err := d.volumeDir(rec)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != volumeDataPerm || !fi.IsDir() {
		t.Errorf("volume dir mode = %s, want dir %o", fi.Mode(), volumeDataPerm)
	}
	// Nothing is left in the work area.
	entries, _ := os.ReadDir(d.store.work)
	if len(entries) != 0 {
		t.Errorf("work area not empty: %v", entries)
	}
}

func TestDeleteVolume(t *testing.T) {
	ctx := context.Background()
	d := newTestDriver(t, Options{})
	id := mustCreate(t, d, createReq("del", 0))
	testkit.WriteFile(t, d.store.volumePath(volumeIDOf(id))+"/a/b", "x", 0o400)
	if err := os.Chmod(d.store.volumePath(volumeIDOf(id))+"/a", 0o500); err != nil {
		t.Fatal(err)
	}

	for i := range 2 { // the second call deletes a volume that no longer exists
		if _, err := d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Fatalf("DeleteVolume #%d: %v", i+1, err)
		}
	}
	if _, err := os.Lstat(d.store.volumePath(volumeIDOf(id))); !os.IsNotExist(err) {
		t.Errorf("data dir still there: %v", err)
	}
	if _, err := d.store.readVolume(volumeIDOf(id)); !os.IsNotExist(err) {
		t.Errorf("record still there: %v", err)
	}
	_, err := d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{})
	testkit.WantCode(t, err, codes.InvalidArgument, "volume_id is required")
}

func TestValidateVolumeCapabilities(t *testing.T) {
	ctx := context.Background()
	d := newTestDriver(t, Options{})
	id := mustCreate(t, d, createReq("vvc", 0))
	tests := []struct {
		name      string
		req       *csi.ValidateVolumeCapabilitiesRequest
		code      codes.Code
		confirmed bool
		msg       string
	}{
		{"supported", &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: []*csi.VolumeCapability{rwo},
			Parameters: map[string]string{"a": "b"}}, codes.OK, true, ""},
		{"reader only", &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: []*csi.VolumeCapability{
			testkit.MountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY)}}, codes.OK, true, ""},
		{"block is not confirmed", &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: []*csi.VolumeCapability{
			blockCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}}, codes.OK, false, "block"},
		{"multi node is not confirmed", &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: []*csi.VolumeCapability{
			testkit.MountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)}}, codes.OK, false, "node-local"},
		{"no id", &csi.ValidateVolumeCapabilitiesRequest{VolumeCapabilities: []*csi.VolumeCapability{rwo}}, codes.InvalidArgument, false, "volume_id"},
		{"no capabilities", &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id}, codes.InvalidArgument, false, "volume_capabilities"},
		{"unknown volume", &csi.ValidateVolumeCapabilitiesRequest{VolumeId: volumeIDFor("nope"), VolumeCapabilities: []*csi.VolumeCapability{rwo}},
			codes.NotFound, false, volumeIDFor("nope")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := d.ValidateVolumeCapabilities(ctx, tc.req)
			if tc.code != codes.OK {
				testkit.WantCode(t, err, tc.code, tc.msg)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.confirmed {
				want := &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
					VolumeCapabilities: tc.req.VolumeCapabilities, Parameters: tc.req.Parameters}}
				if diff := cmp.Diff(want, resp, protocmp.Transform()); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
				return
			}
			if resp.Confirmed != nil || !strings.Contains(resp.Message, tc.msg) {
				t.Errorf("want unconfirmed with a message about %q, got %v", tc.msg, resp)
			}
		})
	}
}

func TestControllerExpandVolume(t *testing.T) {
	ctx := context.Background()
	d := newTestDriver(t, Options{})
	id := mustCreate(t, d, createReq("grow", 100))
	tests := []struct {
		name string
		req  *csi.ControllerExpandVolumeRequest
		code codes.Code
		want int64 // capacity afterwards
		msg  string
	}{
		{"grow", &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 200}}, codes.OK, 200, ""},
		{"again is a no-op", &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 200}}, codes.OK, 200, ""},
		{"smaller required keeps size", &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 150}}, codes.OK, 200, ""},
		{"limit only, above size", &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{LimitBytes: 300}}, codes.OK, 200, ""},
		{"shrink", &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 100, LimitBytes: 150}},
			codes.OutOfRange, 200, "cannot shrink"},
		{"no range", &csi.ControllerExpandVolumeRequest{VolumeId: id}, codes.InvalidArgument, 200, "capacity_range is required"},
		{"empty range", &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{}}, codes.InvalidArgument, 200, "required_bytes or limit_bytes"},
		{"no id", &csi.ControllerExpandVolumeRequest{CapacityRange: &csi.CapacityRange{RequiredBytes: 1}}, codes.InvalidArgument, 200, "volume_id"},
		{"block capability", &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 1},
			VolumeCapability: blockCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}, codes.InvalidArgument, 200, "block"},
		{"unknown volume", &csi.ControllerExpandVolumeRequest{VolumeId: volumeIDFor("x"), CapacityRange: &csi.CapacityRange{RequiredBytes: 1}},
			codes.NotFound, 200, "not found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := d.ControllerExpandVolume(ctx, tc.req)
			if tc.code != codes.OK {
				testkit.WantCode(t, err, tc.code, tc.msg)
			} else if err != nil {
				t.Fatal(err)
			} else if diff := cmp.Diff(&csi.ControllerExpandVolumeResponse{CapacityBytes: tc.want}, resp, protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			rec, err := d.store.readVolume(volumeIDOf(id))
			if err != nil || rec.CapacityBytes != tc.want {
				t.Errorf("recorded capacity = %d (%v), want %d", rec.CapacityBytes, err, tc.want)
			}
		})
	}
}

func TestGetCapacity(t *testing.T) {
	d := newTestDriver(t, Options{})
	resp, err := d.GetCapacity(context.Background(), &csi.GetCapacityRequest{VolumeCapabilities: []*csi.VolumeCapability{rwo}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.AvailableCapacity <= 0 {
		t.Errorf("available capacity = %d, want > 0", resp.AvailableCapacity)
	}
	resp, err = d.GetCapacity(context.Background(), &csi.GetCapacityRequest{VolumeCapabilities: []*csi.VolumeCapability{
		blockCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}})
	if err != nil || resp.AvailableCapacity != 0 {
		t.Errorf("block: capacity %d, error %v; want 0 and no error", resp.GetAvailableCapacity(), err)
	}
}

func TestControllerGetVolumeAndHealth(t *testing.T) {
	ctx := context.Background()
	d := newTestDriver(t, Options{})
	id := mustCreate(t, d, createReq("health", 42))

	got, err := d.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: id})
	if err != nil {
		t.Fatal(err)
	}
	want := &csi.ControllerGetVolumeResponse{
		Volume: &csi.Volume{VolumeId: id, CapacityBytes: 42},
		Status: &csi.ControllerGetVolumeResponse_VolumeStatus{},
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("ControllerGetVolume (-want +got):\n%s", diff)
	}
	health := func() *csi.VolumeHealth {
		t.Helper()
		resp, err := d.ControllerGetVolumeHealth(ctx, &csi.ControllerGetVolumeHealthRequest{VolumeId: id})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetVolumeHealth()
	}
	if diff := cmp.Diff(&csi.VolumeHealth{VolumeId: id}, health(), protocmp.Transform()); diff != "" {
		t.Errorf("healthy volume (-want +got):\n%s", diff)
	}

	// Published (its directory made at first use), then the data
	// directory vanishes behind the driver's back.
	rec, err := d.store.readVolume(volumeIDOf(id))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.volumeDir(rec); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(d.store.volumePath(volumeIDOf(id))); err != nil {
		t.Fatal(err)
	}
	h := health()
	if len(h.HealthStatuses) != 1 || h.HealthStatuses[0].Status != csi.VolumeHealthErrorType_INACCESSIBLE ||
		h.HealthStatuses[0].Reason != "DataDirectoryMissing" {
		t.Errorf("health after data loss = %v", h)
	}
	list, err := d.ControllerListVolumeHealth(ctx, &csi.ControllerListVolumeHealthRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Entries) != 1 || list.Entries[0].VolumeId != id {
		t.Errorf("ControllerListVolumeHealth = %v, want the one broken volume", list)
	}
	_, err = d.ControllerListVolumeHealth(ctx, &csi.ControllerListVolumeHealthRequest{StartingToken: "bogus"})
	testkit.WantCode(t, err, codes.Aborted, "bogus")
	_, err = d.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: volumeIDFor("missing")})
	testkit.WantCode(t, err, codes.NotFound)
	_, err = d.ControllerGetVolumeHealth(ctx, &csi.ControllerGetVolumeHealthRequest{})
	testkit.WantCode(t, err, codes.InvalidArgument, "volume_id is required")
}

func TestControllerCapabilities(t *testing.T) {
	rpcs := func(d *Driver) []csi.ControllerServiceCapability_RPC_Type {
		resp, err := d.ControllerGetCapabilities(context.Background(), &csi.ControllerGetCapabilitiesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var out []csi.ControllerServiceCapability_RPC_Type
		for _, c := range resp.Capabilities {
			out = append(out, c.GetRpc().GetType())
		}
		return out
	}
	base := []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY,
		csi.ControllerServiceCapability_RPC_GET_VOLUME,
		csi.ControllerServiceCapability_RPC_GET_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		csi.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH,
		csi.ControllerServiceCapability_RPC_LIST_VOLUME_HEALTH,
	}
	if diff := cmp.Diff(base, rpcs(newTestDriver(t, Options{}))); diff != "" {
		t.Errorf("default (-want +got):\n%s", diff)
	}
	withPublish := append(base,
		csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
		csi.ControllerServiceCapability_RPC_PUBLISH_READONLY,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES)
	if diff := cmp.Diff(withPublish, rpcs(newTestDriver(t, Options{ControllerPublish: true}))); diff != "" {
		t.Errorf("ControllerPublish (-want +got):\n%s", diff)
	}
}
