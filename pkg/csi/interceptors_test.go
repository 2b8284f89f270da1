package csi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
)

// logLines parses a JSON log into records.
func logLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// findLog returns the records whose fields include every given pair.
func findLog(lines []map[string]any, kv ...string) []map[string]any {
	var out []map[string]any
next:
	for _, l := range lines {
		for i := 0; i+1 < len(kv); i += 2 {
			if v, _ := l[kv[i]].(string); v != kv[i+1] {
				continue next
			}
		}
		out = append(out, l)
	}
	return out
}

// panicky is a controller whose CreateVolume panics the way a nil
// dereference in a handler would.
type panicky struct {
	csi.UnimplementedControllerServer
}

func (panicky) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	var vol *csi.Volume
	if req.GetName() != "" {
		_ = vol.VolumeId // nil dereference
	}
	return &csi.CreateVolumeResponse{}, nil
}

func (panicky) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	return &csi.ControllerGetCapabilitiesResponse{}, nil
}

func TestPanicBecomesInternal(t *testing.T) {
	logs := &lockedBuffer{}
	log := jsonLogger(t, logs, "info")
	path := filepath.Join(testkit.SocketDir(t), "p.sock")
	cc := serveGRPC(t, path, pcsi.NewServer(serviceFunc(func(srv *grpc.Server) {
		csi.RegisterControllerServer(srv, panicky{})
	}), log))
	client := csi.NewControllerClient(cc)
	ctx := callCtx(t)

	idRE := regexp.MustCompile(`\(request (\d+)\)`)
	var ids []string
	for i := 0; i < 2; i++ {
		_, err := client.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-1"})
		testkit.WantCode(t, err, codes.Internal, "CreateVolume", "see the driver log")
		m := idRE.FindStringSubmatch(status.Convert(err).Message())
		if m == nil {
			t.Fatalf("message %q has no request id", status.Convert(err).Message())
		}
		ids = append(ids, m[1])
		// The process keeps serving, panicking handler included.
		if _, err := client.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{}); err != nil {
			t.Fatalf("after a panic: %v", err)
		}
	}
	if ids[0] == ids[1] {
		t.Errorf("two requests share id %s", ids[0])
	}
	if _, err := client.CreateVolume(ctx, &csi.CreateVolumeRequest{}); err != nil {
		t.Errorf("non-panicking path after panics: %v", err)
	}

	lines := logLines(t, logs.String())
	for _, id := range ids {
		p := findLog(lines, "msg", "panic in handler", "request_id", id)
		if len(p) != 1 {
			t.Fatalf("want one panic log for request %s, got %d in:\n%s", id, len(p), logs.String())
		}
		if s, _ := p[0]["stack"].(string); !strings.Contains(s, "panicky.CreateVolume") {
			t.Errorf("panic log has no stack naming the handler: %v", p[0])
		}
		rpc := findLog(lines, "msg", "rpc", "request_id", id, "method", "CreateVolume", "code", "Internal", "level", "ERROR")
		if len(rpc) != 1 {
			t.Errorf("want one ERROR rpc log for request %s, got %d in:\n%s", id, len(rpc), logs.String())
		}
	}
}

// TestLogs: every routed call logs method, connection, request id and
// code, and no secret value, from the request or the connection file,
// ever appears — at debug level, where requests and responses are logged.
func TestLogs(t *testing.T) {
	f := newFakeUpstream(t)
	f.setErr("DeleteVolume", status.Error(codes.FailedPrecondition, "volume has snapshots"))
	p := startProxy(t)
	p.add(t, "a", conn{Endpoint: f.Endpoint, Secrets: map[string]string{"token": "s3cr3t-conn-token"}})
	ctx := callCtx(t)

	req := createReq("pvc-1", map[string]string{"connection": "a"})
	req.Secrets = map[string]string{"password": "s3cr3t-req-password"}
	if _, err := p.Controller.CreateVolume(ctx, req); err != nil {
		t.Fatal(err)
	}
	_, err := p.Controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "v:a/vol-pvc-1", Secrets: map[string]string{"password": "s3cr3t-req-2"}})
	testkit.WantCode(t, err, codes.FailedPrecondition)
	if _, err := p.Node.NodeStageVolume(ctx, stageReq("v:a/vol-pvc-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Controller.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{
		VolumeId: "v:a/vol-pvc-1", CapacityRange: &csi.CapacityRange{RequiredBytes: 1}, Secrets: map[string]string{"k": "s3cr3t-exp"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Identity.Probe(ctx, &csi.ProbeRequest{}); err != nil {
		t.Fatal(err)
	}

	// The upstream did get the secrets: the log is clean because it strips
	// them, not because they went missing.
	if got := only[*csi.CreateVolumeRequest](t, f, "CreateVolume").GetSecrets(); got["token"] != "s3cr3t-conn-token" || got["password"] != "s3cr3t-req-password" {
		t.Fatalf("upstream secrets = %v", got)
	}
	out := p.Logs.String()
	if strings.Contains(out, secretMarker) {
		t.Fatalf("log contains a secret:\n%s", out)
	}
	lines := logLines(t, out)
	for _, tt := range []struct{ method, code string }{
		{"CreateVolume", "OK"}, {"DeleteVolume", "FailedPrecondition"}, {"NodeStageVolume", "OK"}, {"ControllerExpandVolume", "OK"},
	} {
		rpc := findLog(lines, "msg", "rpc", "method", tt.method, "connection", "a", "code", tt.code)
		if len(rpc) != 1 {
			t.Errorf("want one rpc log for %s with connection and code %s, got %d", tt.method, tt.code, len(rpc))
			continue
		}
		if id, _ := rpc[0]["request_id"].(string); id == "" {
			t.Errorf("%s rpc log has no request_id: %v", tt.method, rpc[0])
		}
		if tt.code != "OK" {
			if e, _ := rpc[0]["error"].(string); !strings.Contains(e, "volume has snapshots") {
				t.Errorf("%s rpc log error = %q", tt.method, e)
			}
		}
	}
	reqLog := findLog(lines, "msg", "request", "method", "CreateVolume")
	if len(reqLog) != 1 {
		t.Fatalf("want one debug request log for CreateVolume, got %d", len(reqLog))
	}
	if r, _ := reqLog[0]["request"].(string); !strings.Contains(r, "pvc-1") || !strings.Contains(r, "stripped") {
		t.Errorf("request log %q should show the request with secrets stripped", r)
	}
	if len(findLog(lines, "msg", "rpc", "method", "Probe", "level", "INFO")) != 0 {
		t.Error("Probe logged at info; sidecars poll it")
	}
}

// TestLogsAtInfo: at info level a failed call is still logged with its
// connection and code, and requests are not.
func TestLogsAtInfo(t *testing.T) {
	// The harness logs at debug; serve its driver again behind an
	// info-level chain.
	p := startProxy(t)
	logs := &lockedBuffer{}
	log := jsonLogger(t, logs, "info")
	srvPath := filepath.Join(testkit.SocketDir(t), "i.sock")
	cc := serveGRPC(t, srvPath, pcsi.NewServer(p.Driver, log))
	client := csi.NewControllerClient(cc)
	_, err := client.ControllerGetVolume(callCtx(t), &csi.ControllerGetVolumeRequest{VolumeId: "v:missing/vol-1"})
	testkit.WantCode(t, err, codes.FailedPrecondition)

	lines := logLines(t, logs.String())
	if len(findLog(lines, "msg", "rpc", "method", "ControllerGetVolume", "connection", "missing", "code", "FailedPrecondition")) != 1 {
		t.Errorf("failed call not logged with connection and code:\n%s", logs.String())
	}
	if len(findLog(lines, "msg", "request")) != 0 {
		t.Errorf("requests logged at info level:\n%s", logs.String())
	}
}

// TestLogLevels: at info level the calls sidecars and kubelet make on a
// timer are not logged when they succeed, and are when they fail; calls
// made once per sidecar start are. Durations are seconds in JSON.
func TestLogLevels(t *testing.T) {
	f := newFakeUpstream(t)
	p := startProxy(t)
	p.add(t, "a", conn{Endpoint: f.Endpoint})
	logs := &lockedBuffer{}
	cc := serveGRPC(t, filepath.Join(testkit.SocketDir(t), "l.sock"), pcsi.NewServer(p.Driver, jsonLogger(t, logs, "info")))
	id, ctrl, node := csi.NewIdentityClient(cc), csi.NewControllerClient(cc), csi.NewNodeClient(cc)
	ctx := callCtx(t)
	a := map[string]string{"connection": "a"}

	calls := []struct {
		method string
		call   func() error
		logged bool
	}{
		{"Probe", func() error { _, err := id.Probe(ctx, &csi.ProbeRequest{}); return err }, false},
		{"ControllerGetCapabilities", func() error {
			_, err := ctrl.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
			return err
		}, false},
		{"NodeGetCapabilities", func() error { _, err := node.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{}); return err }, false},
		{"GetCapacity", func() error { _, err := ctrl.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: a}); return err }, false},
		{"NodeGetVolumeStats", func() error {
			_, err := node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "v:a/vol-1", VolumePath: "/mnt/v"})
			return err
		}, false},
		{"GetPluginInfo", func() error { _, err := id.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{}); return err }, true},
		{"GetPluginCapabilities", func() error {
			_, err := id.GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
			return err
		}, true},
		{"NodeGetInfo", func() error { _, err := node.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{}); return err }, true},
		{"CreateVolume", func() error { _, err := ctrl.CreateVolume(ctx, createReq("pvc-1", a)); return err }, true},
	}
	for _, c := range calls {
		if err := c.call(); err != nil {
			t.Fatalf("%s: %v", c.method, err)
		}
	}
	// A failed poll is news.
	_, err := ctrl.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: map[string]string{"connection": "gone"}})
	testkit.WantCode(t, err, codes.FailedPrecondition)

	lines := logLines(t, logs.String())
	for _, c := range calls {
		got := findLog(lines, "msg", "rpc", "method", c.method, "code", "OK")
		if c.logged != (len(got) == 1) {
			t.Errorf("%s: %d rpc lines at info, want logged=%t", c.method, len(got), c.logged)
		}
		for _, l := range got {
			if _, ok := l["duration"].(float64); !ok {
				t.Errorf("%s: duration %#v, want seconds as a number", c.method, l["duration"])
			}
		}
	}
	if got := findLog(lines, "msg", "rpc", "method", "GetCapacity", "code", "FailedPrecondition", "level", "INFO"); len(got) != 1 {
		t.Errorf("failed GetCapacity: %d lines at info, want 1:\n%s", len(got), logs.String())
	}
}
