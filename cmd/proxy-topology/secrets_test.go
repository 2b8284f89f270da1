package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Every secret value in this test contains secretMarker.
const secretMarker = "s3cr3t"

// TestSecretsNeverLogged calls every RPC of the CSI spec through a proxy
// served by Serve, with request secrets on every request that has a
// secrets field and connection secrets in the connection files, and then
// looks for any secret value in the whole debug log and in /metrics.
func TestSecretsNeverLogged(t *testing.T) {
	base := t.TempDir()
	s := startServe(t, localHostpathMain, map[string]string{
		"local": `driver: local-hostpath
local-hostpath:
  shareBasePath: ` + base + `
  stage: true
  controllerPublish: true
csi:
  secrets:
    connection-token: conn-` + secretMarker + `-1
`,
		// An upstream that is not there: failures must not leak either.
		"dead": `driver: csi
csi:
  endpoint: unix:///nonexistent/dead.sock
  timeout: 1s
  secrets:
    connection-token: conn-` + secretMarker + `-2
`,
	})
	conn, err := grpc.NewClient(s.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	mnt := t.TempDir()
	staging, target := filepath.Join(mnt, "staging"), filepath.Join(mnt, "target")
	if err := os.MkdirAll(staging, 0o750); err != nil {
		t.Fatal(err)
	}
	vcap := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	params := map[string]string{"connection": "local"}
	var volumeID, snapshotID string

	// requests builds each call's request from what earlier calls
	// returned; methods not listed get an empty request (still with
	// secrets). The order is a volume's life cycle.
	type step struct {
		method string
		req    func() proto.Message
		after  func(proto.Message)
	}
	steps := []step{
		{"/csi.v1.Identity/GetPluginInfo", nil, nil},
		{"/csi.v1.Identity/GetPluginCapabilities", nil, nil},
		{"/csi.v1.Identity/Probe", nil, nil},
		{"/csi.v1.Controller/ControllerGetCapabilities", nil, nil},
		{"/csi.v1.Node/NodeGetCapabilities", nil, nil},
		{"/csi.v1.Node/NodeGetInfo", nil, nil},
		{"/csi.v1.Controller/CreateVolume", func() proto.Message {
			return &csi.CreateVolumeRequest{Name: "pvc-secret", Parameters: params, VolumeCapabilities: []*csi.VolumeCapability{vcap}}
		}, func(m proto.Message) { volumeID = m.(*csi.CreateVolumeResponse).GetVolume().GetVolumeId() }},
		{"/csi.v1.Controller/CreateVolume", func() proto.Message { // fails: upstream is dead
			return &csi.CreateVolumeRequest{Name: "pvc-dead", Parameters: map[string]string{"connection": "dead"}, VolumeCapabilities: []*csi.VolumeCapability{vcap}}
		}, nil},
		{"/csi.v1.Controller/ValidateVolumeCapabilities", func() proto.Message {
			return &csi.ValidateVolumeCapabilitiesRequest{VolumeId: volumeID, VolumeCapabilities: []*csi.VolumeCapability{vcap}}
		}, nil},
		{"/csi.v1.Controller/ControllerGetVolume", func() proto.Message { return &csi.ControllerGetVolumeRequest{VolumeId: volumeID} }, nil},
		{"/csi.v1.Controller/ControllerGetVolumeHealth", func() proto.Message { return &csi.ControllerGetVolumeHealthRequest{VolumeId: volumeID} }, nil},
		{"/csi.v1.Controller/ControllerListVolumeHealth", nil, nil},
		{"/csi.v1.Controller/ListVolumes", nil, nil},
		{"/csi.v1.Controller/GetCapacity", func() proto.Message { return &csi.GetCapacityRequest{Parameters: params} }, nil},
		{"/csi.v1.Controller/ControllerExpandVolume", func() proto.Message {
			return &csi.ControllerExpandVolumeRequest{VolumeId: volumeID, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20}, VolumeCapability: vcap}
		}, nil},
		{"/csi.v1.Controller/ControllerModifyVolume", func() proto.Message {
			return &csi.ControllerModifyVolumeRequest{VolumeId: volumeID, MutableParameters: map[string]string{"iops": "100"}}
		}, nil},
		{"/csi.v1.Controller/CreateSnapshot", func() proto.Message {
			return &csi.CreateSnapshotRequest{Name: "snap-secret", SourceVolumeId: volumeID}
		}, func(m proto.Message) { snapshotID = m.(*csi.CreateSnapshotResponse).GetSnapshot().GetSnapshotId() }},
		{"/csi.v1.Controller/GetSnapshot", func() proto.Message { return &csi.GetSnapshotRequest{SnapshotId: snapshotID} }, nil},
		{"/csi.v1.Controller/ListSnapshots", nil, nil},
		{"/csi.v1.Controller/ControllerPublishVolume", func() proto.Message {
			return &csi.ControllerPublishVolumeRequest{VolumeId: volumeID, NodeId: "node-1", VolumeCapability: vcap}
		}, nil},
		{"/csi.v1.Node/NodeStageVolume", func() proto.Message {
			return &csi.NodeStageVolumeRequest{VolumeId: volumeID, StagingTargetPath: staging, VolumeCapability: vcap}
		}, nil},
		{"/csi.v1.Node/NodePublishVolume", func() proto.Message {
			return &csi.NodePublishVolumeRequest{VolumeId: volumeID, StagingTargetPath: staging, TargetPath: target, VolumeCapability: vcap}
		}, nil},
		{"/csi.v1.Node/NodeGetVolumeStats", func() proto.Message { return &csi.NodeGetVolumeStatsRequest{VolumeId: volumeID, VolumePath: target} }, nil},
		{"/csi.v1.Node/NodeGetVolumeHealth", func() proto.Message {
			return &csi.NodeGetVolumeHealthRequest{VolumeId: volumeID, VolumePublishPath: target}
		}, nil},
		{"/csi.v1.Node/NodeExpandVolume", func() proto.Message {
			return &csi.NodeExpandVolumeRequest{VolumeId: volumeID, VolumePath: target, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20}}
		}, nil},
		{"/csi.v1.Node/NodeUnpublishVolume", func() proto.Message { return &csi.NodeUnpublishVolumeRequest{VolumeId: volumeID, TargetPath: target} }, nil},
		{"/csi.v1.Node/NodeUnstageVolume", func() proto.Message {
			return &csi.NodeUnstageVolumeRequest{VolumeId: volumeID, StagingTargetPath: staging}
		}, nil},
		{"/csi.v1.Controller/ControllerUnpublishVolume", func() proto.Message {
			return &csi.ControllerUnpublishVolumeRequest{VolumeId: volumeID, NodeId: "node-1"}
		}, nil},
		{"/csi.v1.Controller/DeleteSnapshot", func() proto.Message { return &csi.DeleteSnapshotRequest{SnapshotId: snapshotID} }, nil},
		{"/csi.v1.Controller/DeleteVolume", func() proto.Message { return &csi.DeleteVolumeRequest{VolumeId: volumeID} }, nil},
		{"/csi.v1.Node/NodeGetStorageHealth", nil, nil},
		{"/csi.v1.GroupController/GroupControllerGetCapabilities", nil, nil},
	}

	// Every RPC of the spec must be in the script: a new one cannot slip
	// past this test.
	called := map[string]bool{}
	for _, st := range steps {
		called[st.method] = true
	}
	var missing []string
	services := csi.File_csi_proto.Services()
	for i := 0; i < services.Len(); i++ {
		sd := services.Get(i)
		for j := 0; j < sd.Methods().Len(); j++ {
			md := sd.Methods().Get(j)
			if md.IsStreamingClient() || md.IsStreamingServer() {
				continue
			}
			name := "/" + string(sd.FullName()) + "/" + string(md.Name())
			if !called[name] && !strings.Contains(string(sd.FullName()), "GroupController") && !strings.Contains(string(sd.FullName()), "SnapshotMetadata") {
				missing = append(missing, name)
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("RPCs not exercised: %v", missing)
	}

	failures := map[string]string{}
	secretsSet := 0
	for _, st := range steps {
		md := methodDescriptor(t, st.method)
		var req proto.Message
		if st.req != nil {
			req = st.req()
		} else {
			mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
			if err != nil {
				t.Fatal(err)
			}
			req = mt.New().Interface()
		}
		if f := req.ProtoReflect().Descriptor().Fields().ByName("secrets"); f != nil && f.IsMap() {
			m := req.ProtoReflect().Mutable(f).Map()
			m.Set(protoreflect.ValueOfString("password").MapKey(), protoreflect.ValueOfString("req-"+secretMarker+"-pw"))
			m.Set(protoreflect.ValueOfString("token").MapKey(), protoreflect.ValueOfString("req-"+secretMarker+"-token"))
			secretsSet++
		}
		rt, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
		if err != nil {
			t.Fatal(err)
		}
		resp := rt.New().Interface()
		if err := conn.Invoke(ctx, st.method, req, resp); err != nil {
			failures[st.method] = err.Error()
		} else if st.after != nil {
			st.after(resp)
		}
	}
	if volumeID == "" || snapshotID == "" {
		t.Fatalf("CreateVolume or CreateSnapshot failed, the script cannot run: %v", failures)
	}
	if secretsSet < 15 {
		t.Errorf("only %d requests carried secrets", secretsSet)
	}
	t.Logf("calls that failed (expected for a dead upstream or unsupported RPCs): %d", len(failures))
	for m, e := range failures {
		t.Logf("  %s: %s", m, e)
	}

	logs := s.Logs.String()
	if strings.Contains(logs, secretMarker) {
		for _, l := range strings.Split(logs, "\n") {
			if strings.Contains(l, secretMarker) {
				t.Errorf("log line contains a secret: %s", l)
			}
		}
	}
	// The requests were logged, with their secrets replaced: the check
	// above is not vacuous.
	if n := strings.Count(logs, "***stripped***"); n < secretsSet {
		t.Errorf("%d stripped secret fields in the log, want at least %d", n, secretsSet)
	}
	for _, want := range []string{`"msg":"rpc"`, `"method":"CreateVolume"`, `"connection":"local"`, `"request_id":`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %s", want)
		}
	}
	var methods []string
	for _, st := range steps {
		methods = append(methods, st.method)
	}
	checkOneLinePerRPC(t, logs, methods)
	for _, e := range failures {
		if strings.Contains(e, secretMarker) {
			t.Errorf("an error returned to the client contains a secret: %s", e)
		}
	}
	_, body := httpGet(t, s.Metrics+"/metrics")
	if strings.Contains(body, secretMarker) {
		t.Error("/metrics contains a secret")
	}
	if !strings.Contains(body, `proxy_topology_csi_requests_total{code="OK",connection="local",method="NodePublishVolume"} 1`) {
		t.Errorf("/metrics lacks the NodePublishVolume call:\n%s", grepLines(body, "csi_requests_total"))
	}
}

// checkOneLinePerRPC checks that each call was logged exactly once as
// "rpc", at debug for the methods sidecars poll and at info (error for
// INTERNAL) for the rest, with the attributes the log promises.
func checkOneLinePerRPC(t *testing.T, logs string, calls []string) {
	t.Helper()
	want := map[string]int{}
	for _, c := range calls {
		if strings.Contains(c, "GroupController") {
			continue // not served: gRPC answers before any interceptor
		}
		want[c[strings.LastIndexByte(c, '/')+1:]]++
	}
	got := map[string]int{}
	// The calls the CO polls are at debug when they succeed (pkg/csi).
	polled := map[string]bool{"Probe": true, "NodeGetCapabilities": true, "NodeGetVolumeStats": true,
		"GetCapacity": true, "ControllerGetCapabilities": true}
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, line)
		}
		if rec["msg"] != "rpc" {
			continue
		}
		method, _ := rec["method"].(string)
		got[method]++
		level, quiet := rec["level"], polled[method] && rec["code"] == "OK"
		switch {
		case quiet && level != "DEBUG":
			t.Errorf("%s logged at %v, want DEBUG", method, level)
		case !quiet && level != "INFO" && !(level == "ERROR" && rec["code"] == "Internal"):
			t.Errorf("%s logged at %v, want INFO", method, level)
		}
		for _, k := range []string{"request_id", "code", "duration"} {
			if _, ok := rec[k]; !ok {
				t.Errorf("%s log line lacks %s: %s", method, k, line)
			}
		}
	}
	for m, n := range want {
		if got[m] != n {
			t.Errorf("%s: %d rpc log lines, want %d", m, got[m], n)
		}
	}
	for m := range got {
		if want[m] == 0 {
			t.Errorf("%s logged but never called", m)
		}
	}
}

func methodDescriptor(t *testing.T, full string) protoreflect.MethodDescriptor {
	t.Helper()
	parts := strings.Split(strings.TrimPrefix(full, "/"), "/")
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(parts[0]))
	if err != nil {
		t.Fatalf("%s: %v", full, err)
	}
	md := d.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(parts[1]))
	if md == nil {
		t.Fatalf("%s: no such method", full)
	}
	return md
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
