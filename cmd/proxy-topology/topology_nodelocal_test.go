package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTopologyNodeLocal: the dry run decides a node-local connection as
// the controller on the given node would: pinned to that node by
// <prefix>/node, and refused for a strict term naming another node.
func TestTopologyNodeLocal(t *testing.T) {
	dir := t.TempDir()
	cfg := writeDryRunConfig(t, dir)
	if err := os.WriteFile(filepath.Join(dir, "connections", "disk.yaml"), []byte("driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: /var/lib/pt/disk\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{name: "no requirement", code: 0, want: []string{`decided as the controller on node "node-1"`, "CreateVolume: OK",
			"accessible_topology: [{org.democratic-csi.topology/node=node-1}]"}},
		{name: "its own zone", args: []string{"--requisite", "zone=zone1"}, code: 0,
			want: []string{"accessible_topology: [{org.democratic-csi.topology/node=node-1}]"}},
		{name: "another node", args: []string{"--requisite", "node=node-2", "--preferred", "node=node-2"}, code: 1,
			want: []string{"CreateVolume: ResourceExhausted", `runs on node "node-1"`, `asked for node "node-2"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runTopology(t, append([]string{"--config", cfg, "--node-name", "node-1", "--connection", "disk"}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, tc.code, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
