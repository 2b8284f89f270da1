package csiclient

import (
	"bytes"
	"context"
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
)

func (f *fakeController) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	f.record(req)
	return &csi.DeleteVolumeResponse{}, nil
}

func (f *fakeController) ControllerExpandVolume(_ context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	f.record(req)
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: req.GetCapacityRange().GetRequiredBytes()}, nil
}

func (f *fakeController) DeleteSnapshot(_ context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	f.record(req)
	return &csi.DeleteSnapshotResponse{}, nil
}

// executeErr is execute with stderr kept (warnings go there).
func executeErr(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := NewCommand()
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err = cmd.Execute()
	return out.String(), errOut.String(), err
}

// TestUsageErrorsCallNothing: a flag the command cannot honour is a usage
// error naming the flag (and the key, for a term), found before any call.
func TestUsageErrorsCallNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"timeout zero", []string{"--timeout", "0", "create-volume", "--name", "x"}, "--timeout 0s: want a positive duration"},
		{"timeout negative", []string{"create-volume", "--name", "x", "--timeout=-1s"}, "--timeout -1s: want a positive duration"},
		{"timeout negative on a node command", []string{"--timeout", "-5m", "info"}, "--timeout -5m0s: want a positive duration"},
		{"one key twice in a requisite term", []string{"create-volume", "--name", "x", "--requisite", "zone=a,zone=b"},
			`--requisite: "zone=a,zone=b": key p.example.com/zone twice; a term has one value a key`},
		{"one key twice in a preferred term", []string{"create-volume", "--name", "x", "--preferred", "rack=r1,zone=a,zone=a"},
			`--preferred: "rack=r1,zone=a,zone=a": key p.example.com/zone twice`},
		{"short and full spelling of one key", []string{"create-volume", "--name", "x", "--requisite", "zone=a,p.example.com/zone=b"},
			`--requisite: "zone=a,p.example.com/zone=b": key p.example.com/zone twice`},
		{"one key twice in a capacity term", []string{"get-capacity", "--topology", "zone=a,zone=b"},
			`--topology: "zone=a,zone=b": key p.example.com/zone twice`},
		{"volume missing", []string{"delete-volume"}, "--volume is required"},
		{"volume given twice", []string{"get-volume", "v1", "--volume", "v2"}, `the ID is given twice (--volume "v2" and "v1"): give --volume alone`},
		{"two positional IDs", []string{"delete-volume", "a", "b"}, `unexpected argument "b"`},
		{"snapshot missing", []string{"delete-snapshot"}, "--snapshot is required"},
		{"expand without a size", []string{"expand-volume", "--volume", "v1"}, "--size is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep, f := startFake(t)
			_, _, err := executeErr(t, append(tc.args, "--prefix", "p.example.com", "--endpoint", ep)...)
			if code := exitCode(err); code != ExitUsage || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %v (exit code %d), want %d and %q", err, code, ExitUsage, tc.msg)
			}
			if len(f.requests) > 0 {
				t.Errorf("a usage error called the driver: %v", f.requests)
			}
		})
	}
}

// TestVolumeAndSnapshotIDs: every command names its volume with --volume
// and its snapshot with --snapshot; the positional ID the controller
// commands once took still works, with a warning on stderr.
func TestVolumeAndSnapshotIDs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		want    proto.Message
		warning string
	}{
		{"delete-volume --volume", []string{"delete-volume", "--volume", "v:c/1"}, &csi.DeleteVolumeRequest{VolumeId: "v:c/1"}, ""},
		{"delete-volume positional", []string{"delete-volume", "v:c/1"}, &csi.DeleteVolumeRequest{VolumeId: "v:c/1"},
			"warning: delete-volume ID is deprecated and goes in the next release; use delete-volume --volume ID\n"},
		{"expand-volume --volume", []string{"expand-volume", "--volume", "v:c/1", "--size", "2Gi"},
			&csi.ControllerExpandVolumeRequest{VolumeId: "v:c/1", CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 30}}, ""},
		{"expand-volume positional", []string{"expand-volume", "v:c/1", "--size", "2Gi"},
			&csi.ControllerExpandVolumeRequest{VolumeId: "v:c/1", CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 30}},
			"warning: expand-volume ID is deprecated and goes in the next release; use expand-volume --volume ID\n"},
		{"delete-snapshot --snapshot", []string{"delete-snapshot", "--snapshot", "s:c/1"}, &csi.DeleteSnapshotRequest{SnapshotId: "s:c/1"}, ""},
		{"delete-snapshot positional", []string{"delete-snapshot", "s:c/1"}, &csi.DeleteSnapshotRequest{SnapshotId: "s:c/1"},
			"warning: delete-snapshot ID is deprecated and goes in the next release; use delete-snapshot --snapshot ID\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep, f := startFake(t)
			_, stderr, err := executeErr(t, append(tc.args, "--endpoint", ep)...)
			if err != nil {
				t.Fatal(err)
			}
			if stderr != tc.warning {
				t.Errorf("stderr %q, want %q", stderr, tc.warning)
			}
			if diff := cmp.Diff([]proto.Message{tc.want}, f.requests, protocmp.Transform()); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}
