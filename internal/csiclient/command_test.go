package csiclient

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
)

// fakeController is a real gRPC server on a unix socket: it records the
// requests it gets, lists three volumes in pages of MaxEntries, and
// refuses CreateVolume for the connection "full".
type fakeController struct {
	csi.UnimplementedControllerServer
	mu       sync.Mutex
	requests []proto.Message
}

func (f *fakeController) record(m proto.Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, m)
}

func (f *fakeController) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	f.record(req)
	if req.GetParameters()["connection"] == "full" {
		return nil, status.Error(codes.ResourceExhausted, "no space left")
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: "v:" + req.GetName(), CapacityBytes: req.GetCapacityRange().GetRequiredBytes()}}, nil
}

func (f *fakeController) ListVolumes(_ context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	f.record(req)
	all := []string{"v1", "v2", "v3"}
	start := 0
	if req.GetStartingToken() != "" {
		start, _ = strconv.Atoi(req.GetStartingToken())
	}
	end := len(all)
	if n := int(req.GetMaxEntries()); n > 0 && start+n < end {
		end = start + n
	}
	resp := &csi.ListVolumesResponse{}
	for _, id := range all[start:end] {
		resp.Entries = append(resp.Entries, &csi.ListVolumesResponse_Entry{Volume: &csi.Volume{VolumeId: id, CapacityBytes: 1 << 30}})
	}
	if end < len(all) {
		resp.NextToken = strconv.Itoa(end)
	}
	return resp, nil
}

func startFake(t *testing.T) (endpoint string, f *fakeController) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "csi.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	f = &fakeController{}
	srv := grpc.NewServer()
	csi.RegisterControllerServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return "unix://" + sock, f
}

// execute runs `csi args…` as the binary would, without its exit-code
// mapping: the error is returned as the command returned it.
func execute(t *testing.T, args ...string) (stdout string, err error) {
	t.Helper()
	stdout, _, err = executeErr(t, args...)
	return stdout, err
}

func exitCode(err error) int {
	var coded interface{ ExitCode() int }
	if errors.As(err, &coded) {
		return coded.ExitCode()
	}
	return -1
}

// TestCreateVolumeRequest: what the flags put in the request, wherever
// the shared flags are given.
func TestCreateVolumeRequest(t *testing.T) {
	ep, f := startFake(t)
	out, err := execute(t, "--prefix", "p.example.com", "create-volume", "--name", "pvc-1",
		"--param", "connection=c1", "--param", "tier=gold", "--secret", "token=x",
		"--requisite", "zone=z1", "--requisite", "zone=z2,rack=r1", "--preferred", "example.org/zone=z2",
		"--size", "1Gi", "--limit", "2G", "--access-mode", "single-node-reader-only", "--fs-type", "xfs",
		"--endpoint", ep)
	if err != nil {
		t.Fatal(err)
	}
	if want := "created volume v:pvc-1\n  capacity:             1Gi (1073741824 bytes)\n  accessible_topology:  none (reachable from every node)\n"; out != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
	want := &csi.CreateVolumeRequest{
		Name:          "pvc-1",
		Parameters:    map[string]string{"connection": "c1", "tier": "gold"},
		Secrets:       map[string]string{"token": "x"},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30, LimitBytes: 2e9},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "xfs"}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY},
		}},
		AccessibilityRequirements: &csi.TopologyRequirement{
			Requisite: []*csi.Topology{
				{Segments: map[string]string{"p.example.com/zone": "z1"}},
				{Segments: map[string]string{"p.example.com/zone": "z2", "p.example.com/rack": "r1"}},
			},
			Preferred: []*csi.Topology{{Segments: map[string]string{"example.org/zone": "z2"}}},
		},
	}
	if diff := cmp.Diff([]proto.Message{want}, f.requests, protocmp.Transform()); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

func TestListVolumesFollowsPages(t *testing.T) {
	ep, f := startFake(t)
	out, err := execute(t, "list-volumes", "--max", "2", "--endpoint", ep)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(out, "3 volumes (2 pages)\n") || !strings.Contains(out, "v3  ") {
		t.Errorf("stdout:\n%s", out)
	}
	if len(f.requests) != 2 || f.requests[1].(*csi.ListVolumesRequest).GetStartingToken() != "2" {
		t.Errorf("requests %v", f.requests)
	}
	out, err = execute(t, "-o", "json", "list-volumes", "--endpoint", ep)
	if err != nil || strings.Count(out, `"volumeId"`) != 3 {
		t.Errorf("json: %v\n%s", err, out)
	}
}

// TestErrors: how each kind of failure is returned; the binary turns
// ExitCode into its exit status.
func TestErrors(t *testing.T) {
	ep, f := startFake(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"rpc", []string{"create-volume", "--name", "x", "--connection", "full"}, ExitFailed, "CreateVolume failed: RESOURCE_EXHAUSTED: no space left"},
		{"unimplemented", []string{"get-volume", "--volume", "v1"}, ExitFailed, "ControllerGetVolume failed: UNIMPLEMENTED: method ControllerGetVolume not implemented"},
		{"missing flag", []string{"create-volume"}, ExitUsage, "--name is required"},
		{"arguments", []string{"delete-volume", "a", "b"}, ExitUsage, `unexpected argument "b"`},
		{"stray argument", []string{"list-volumes", "x"}, ExitUsage, `unexpected argument "x"`},
		{"no command", nil, ExitUsage, "a command is required"},
		{"unknown command", []string{"create-volum"}, ExitUsage, `unknown command "create-volum"; did you mean create-volume?`},
		{"bad endpoint", []string{"info", "--endpoint", "csi.sock"}, ExitUsage, `--endpoint "csi.sock" is none of unix:///path, /path or tcp://host:port`},
		{"one term for capacity", []string{"get-capacity", "--topology", "a=1", "--topology", "a=2"}, ExitUsage, "--topology takes one term"},
		{"block with a file system", []string{"create-volume", "--name", "x", "--block", "--fs-type", "ext4"}, ExitUsage, "--fs-type does not apply to --block"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if args != nil {
				args = append(args, "--endpoint="+ep)
				if tc.name == "bad endpoint" {
					args = tc.args
				}
			}
			_, err := execute(t, args...)
			if code := exitCode(err); code != tc.code || err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %v (exit code %d), want %d and %q", err, code, tc.code, tc.msg)
			}
		})
	}
	var rpc *RPCError
	_, err := execute(t, "create-volume", "--name", "x", "--connection", "full", "--endpoint", ep)
	if !errors.As(err, &rpc) || rpc.Method != "CreateVolume" || status.Code(rpc.Err) != codes.ResourceExhausted {
		t.Errorf("error %#v is not the RPCError of CreateVolume", err)
	}
	// Usage errors are found before any call.
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.requests {
		if r.(*csi.CreateVolumeRequest).GetName() != "x" {
			t.Errorf("unexpected request %v", r)
		}
	}
}
