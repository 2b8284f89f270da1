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
	checkDryRuns(t, cfg, "disk", []dryRunCase{
		{name: "no requirement", code: 0, want: []string{`decided as the controller on node "node-1"`, "CreateVolume: OK",
			"accessible_topology: [{org.democratic-csi.topology/node=node-1}]"}},
		{name: "its own zone", args: []string{"--requisite", "zone=zone1"}, code: 0,
			want: []string{"accessible_topology: [{org.democratic-csi.topology/node=node-1}]"}},
		{name: "another node", args: []string{"--requisite", "node=node-2", "--preferred", "node=node-2"}, code: 1,
			want: []string{"CreateVolume: ResourceExhausted", `runs on node "node-1"`, `asked for node "node-2"`}},
	})
}

// TestTopologyGroupNodeLocal: a group's node-local member admits only the
// dry run's node, as it does in the server (pkg/csi
// TestGroupNodeLocalMember), so a claim for another zone is predicted to
// reach the member of that zone. A dry run that took the node-local member
// for a member without topology predicted it, wrongly, for every claim.
func TestTopologyGroupNodeLocal(t *testing.T) {
	dir := t.TempDir()
	cfg := writeDryRunConfig(t, dir)
	for name, content := range map[string]string{
		"disk":  "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: /var/lib/pt/disk\n",
		"zone2": "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: /mnt/nfs/zone2\nproxy:\n  perDriver:\n    topology:\n    - requirements: {zone: zone2}\n",
		"mixed": "driver: group\ngroup:\n  members: [disk, zone2]\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, "connections", name+".yaml"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	checkDryRuns(t, cfg, "mixed", []dryRunCase{
		{name: "another zone", args: []string{"--requisite", "zone=zone2"}, code: 0, want: []string{
			`member 0 "disk" (` + filepath.Join(dir, "connections", "disk.yaml") + `) offers node "node-1" only (node-local)`,
			"  member: zone2\n", `member "disk" does not admit it, member "zone2" does`,
			"accessible_topology: [{org.democratic-csi.topology/zone=zone2}]"}},
		{name: "this node", args: []string{"--node-term"}, code: 0, want: []string{"  member: disk\n",
			`decided as the controller on node "node-1"`, "accessible_topology: [{org.democratic-csi.topology/node=node-1}]"}},
		{name: "another node", args: []string{"--requisite", "zone=zone1,node=node-2"}, code: 1, want: []string{
			`CreateVolume: ResourceExhausted: topology {org.democratic-csi.topology/node=node-2, org.democratic-csi.topology/zone=zone1} (requisite) is not accessible for any member of group "mixed": member "disk" offers node "node-1" only (node-local)`}},
	})
}

// dryRunCase is one topology dry run on node-1 (args after the config,
// node and connection) and what its exit code and output must be.
type dryRunCase struct {
	name string
	args []string
	code int
	want []string
}

// checkDryRuns runs each case against connection and checks it.
func checkDryRuns(t *testing.T, cfg, connection string, cases []dryRunCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runTopology(t, append([]string{"--config", cfg, "--node-name", "node-1", "--connection", connection}, tc.args...)...)
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
