package nodetopology

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

type fakeLabels struct {
	labels map[string]string
	err    error
	calls  []string // node names asked for
}

func (f *fakeLabels) NodeLabels(ctx context.Context, nodeName string) (map[string]string, error) {
	if ctx == nil {
		panic("nil context")
	}
	f.calls = append(f.calls, nodeName)
	return f.labels, f.err
}

func TestGatherEnvAndFiles(t *testing.T) {
	dir := t.TempDir()
	zone := testkit.WriteFile(t, filepath.Join(dir, "zone"), "z1\n", 0o644)
	exact := testkit.WriteFile(t, filepath.Join(dir, "exact"), strings.Repeat("a", MaxFileSize), 0o644)
	big := testkit.WriteFile(t, filepath.Join(dir, "big"), strings.Repeat("a", MaxFileSize+1), 0o644)
	missing := filepath.Join(dir, "missing")
	t.Setenv("NT_ZONE", "z1")
	t.Setenv("NT_EMPTY", "")
	t.Setenv("NT_UNSET", "") // restores the variable's absence after the test
	os.Unsetenv("NT_UNSET")

	e := mustCompile(t, zoneRules(
		Rule{TopologyKey: "a", Source: SourceEnv, EnvName: "NT_ZONE"},
		Rule{TopologyKey: "b", Source: SourceEnv, EnvName: "NT_EMPTY"},
		Rule{TopologyKey: "c", Source: SourceEnv, EnvName: "NT_UNSET"},
		Rule{TopologyKey: "d", Source: SourceFile, File: zone},
		Rule{TopologyKey: "e", Source: SourceFile, File: exact},
		Rule{TopologyKey: "f", Source: SourceFile, File: big},
		Rule{TopologyKey: "g", Source: SourceFile, File: missing},
		Rule{TopologyKey: "h", Source: SourceFile, File: dir},
	))
	src := &fakeLabels{}
	in := Gather(context.Background(), e, "node-1", src)

	if in.NodeName != "node-1" {
		t.Errorf("NodeName = %q", in.NodeName)
	}
	if host, err := os.Hostname(); err == nil && in.Hostname != host {
		t.Errorf("Hostname = %q, want %q", in.Hostname, host)
	}
	if diff := cmp.Diff(map[string]string{"NT_ZONE": "z1", "NT_EMPTY": ""}, in.Env); diff != "" {
		t.Errorf("Env (-want +got):\n%s", diff)
	}
	if len(src.calls) != 0 || in.Labels != nil || in.LabelsErr != nil {
		t.Errorf("label source used without nodeLabel rules: calls=%v labels=%v err=%v", src.calls, in.Labels, in.LabelsErr)
	}

	if len(in.Files) != 5 {
		t.Errorf("read %d files, want 5: %v", len(in.Files), in.Files)
	}
	if got := in.Files[zone]; got != (FileInput{Content: "z1\n"}) {
		t.Errorf("zone file = %+v, want raw content", got)
	}
	if got := in.Files[exact]; got.Err != nil || len(got.Content) != MaxFileSize {
		t.Errorf("file of exactly MaxFileSize: err=%v len=%d", got.Err, len(got.Content))
	}
	if got := in.Files[big]; !errors.Is(got.Err, ErrFileTooLarge) || got.Content != "" || !strings.Contains(got.Err.Error(), "64 KiB") {
		t.Errorf("oversized file = err %v, content %d bytes; want ErrFileTooLarge naming the limit", got.Err, len(got.Content))
	}
	if got := in.Files[missing]; !errors.Is(got.Err, fs.ErrNotExist) {
		t.Errorf("missing file err = %v, want fs.ErrNotExist", got.Err)
	}
	if got := in.Files[dir]; got.Err == nil || got.Err.Error() != "is a directory" {
		t.Errorf("directory err = %v, want \"is a directory\"", got.Err)
	}

	// The evaluator turns what Gather read into the expected statuses.
	res := e.Evaluate(in)
	statuses := map[string]string{}
	for _, rr := range res.Rules {
		statuses[strings.TrimPrefix(rr.Key, DefaultPrefix+"/")] = rr.Status + ": " + rr.Reason
	}
	want := map[string]string{
		"a": "matched: ",
		"b": "skipped: rendered value is empty",
		"c": "skipped: env NT_UNSET is not set",
		"d": "matched: ",
		"e": "error: rendered value \"" + strings.Repeat("a", maxDisplay) + "…\" is not a valid label value: must be no more than 63 bytes",
		"f": "error: cannot read file " + big + ": file is larger than the 64 KiB limit",
		"g": "skipped: file " + missing + " does not exist",
		"h": "error: cannot read file " + dir + ": is a directory",
	}
	if diff := cmp.Diff(want, statuses); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
}

func TestGatherLabels(t *testing.T) {
	labelRule := zoneRules(Rule{TopologyKey: "zone", Source: SourceNodeLabel, Label: "topology.kubernetes.io/zone"})
	boom := errors.New("boom")
	tests := []struct {
		name      string
		src       *fakeLabels
		wantCalls []string
		want      Inputs
	}{
		{
			name:      "labels",
			src:       &fakeLabels{labels: map[string]string{"topology.kubernetes.io/zone": "eu-1a"}},
			wantCalls: []string{"n1"},
			want:      Inputs{NodeName: "n1", Labels: map[string]string{"topology.kubernetes.io/zone": "eu-1a"}},
		},
		{
			name:      "node without labels",
			src:       &fakeLabels{},
			wantCalls: []string{"n1"},
			want:      Inputs{NodeName: "n1", Labels: map[string]string{}},
		},
		{
			name:      "source fails",
			src:       &fakeLabels{err: boom},
			wantCalls: []string{"n1"},
			want:      Inputs{NodeName: "n1", LabelsErr: boom},
		},
		{
			name: "no source",
			want: Inputs{NodeName: "n1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var src LabelSource
			if tt.src != nil {
				src = tt.src
			}
			got := Gather(context.Background(), mustCompile(t, labelRule), "n1", src)
			got.Hostname = ""
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b error) bool { return a == b })); diff != "" {
				t.Errorf("Inputs (-want +got):\n%s", diff)
			}
			if tt.src != nil {
				if diff := cmp.Diff(tt.wantCalls, tt.src.calls); diff != "" {
					t.Errorf("calls (-want +got):\n%s", diff)
				}
			}
		})
	}
}
