package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestCheckGroups: check validates group files and their members as the
// proxy would find them, and says which member wins where members overlap.
// A node-local member first (local-first) is no member without topology:
// it admits only its controller's node, so the members after it are used.
// A group with every kind of member problem (all-wrong) gets them all in
// one line, in member order: an invalid name hides none of the others.
func TestCheckGroups(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"check", "--config", "testdata/check/groups/proxy.yaml", "--connections-folder", "testdata/check/groups/connections",
		"--csi-endpoint=unix:///run/csi/csi.sock"}, &stdout, &stderr)
	const d = "testdata/check/groups/connections/"
	want := `testdata/check/groups/proxy.yaml: ok
` + d + `all-wrong.yaml: error: group.members[0]: connection name "../x" has invalid character '.' at byte 0 (allowed: letters, digits, and . _ - after the first); group.members[1]: connection "nas-zone4" has no file ` + d + `nas-zone4.yaml: calls that need it fail until it exists; group.members[2]: "zones" is itself a group; a group's members must be ordinary connections; group.members[3]: the group "all-wrong" lists itself; members must be ordinary connections; group.members[5]: "nas-zone1" is already group.members[4]
` + d + `anywhere-first.yaml: warning: group.members[1]: "nfs-anywhere" declares no topology, so it admits every claim: "nas-zone3" after it is never chosen; put it last
` + d + `local-first.yaml: ok
` + d + `missing-member.yaml: error: group.members[1]: connection "nas-zone4" has no file ` + d + `nas-zone4.yaml: calls that need it fail until it exists
` + d + `nas-12.yaml: ok
` + d + `nas-zone1.yaml: ok
` + d + `nas-zone2.yaml: ok
` + d + `nas-zone3.yaml: ok
` + d + `nested-self.yaml: error: group.members[1]: connection "nas-zone4" has no file ` + d + `nas-zone4.yaml: calls that need it fail until it exists; group.members[2]: "zones" is itself a group; a group's members must be ordinary connections; group.members[3]: the group "nested-self" lists itself; members must be ordinary connections
` + d + `nfs-anywhere.yaml: ok
` + d + `node-disk.yaml: warning: node-local: a local-hostpath connection without proxy.perDriver.topology keeps each volume on the disk of the node whose controller creates it, and pins the volume there by org.democratic-csi.topology/node; without the node-local deployment mode (proxy.nodeLocal: true, a controller and a --node-deployment provisioner on every node; docs/kubernetes.md) every volume lands on the one controller's node. If /var/lib/proxy-topology/node-disk is shared storage, declare where it is reachable in proxy.perDriver.topology
` + d + `overlap.yaml: warning: group.members[1]: "nas-zone2" serves [{org.democratic-csi.topology/zone=zone2}] (its proxy.perDriver.topology[0]), and so does "nas-12" (group.members[0]), which comes first: claims for it go to "nas-12"
` + d + `with-fallback.yaml: ok
` + d + `with-topology.yaml: error: proxy: not a key of a group file (driver: group has only group.members; a member's own file holds its endpoint and topology)
` + d + `zones.yaml: ok
checked 16 files: 9 ok, 3 with warnings, 4 with errors
`
	if code != 1 || stdout.String() != want {
		t.Errorf("exit %d\n%s%s\nwant:\n%s", code, stdout.String(), stderr.String(), want)
	}
}

// TestTopologyGroup: the dry run says which member a request would reach
// and why, for explicit terms or for a node (--node-term), and why none
// can.
func TestTopologyGroup(t *testing.T) {
	const d = "testdata/check/groups/connections/"
	base := []string{"--config", "testdata/check/groups/proxy.yaml", "--connections-folder", "testdata/check/groups/connections", "--node-name", "w"}
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		has    []string
		stderr []string
	}{
		{name: "a node of zone2", args: []string{"--env", "ZONE=zone2", "--connection", "zones", "--node-term"}, code: 0, has: []string{
			`group "zones" (` + d + `zones.yaml):`,
			"  requisite: [{org.democratic-csi.topology/zone=zone2}]\n  preferred: [{org.democratic-csi.topology/zone=zone2}]\n",
			`  member 0 "nas-zone1" (` + d + `nas-zone1.yaml) offers [{org.democratic-csi.topology/zone=zone1}]`,
			`  member 2 "nas-zone3": not needed`,
			"  member: nas-zone2\n",
			`  why: preferred term 0 {org.democratic-csi.topology/zone=zone2}: member "nas-zone1" does not admit it, member "nas-zone2" does`,
			`  CreateVolume: OK on member "nas-zone2" (volume ids v:nas-zone2/…)`,
			"  accessible_topology: [{org.democratic-csi.topology/zone=zone2}]\n",
		}},
		{name: "an Immediate claim preferring zone3", code: 0, args: []string{"--env", "ZONE=zone1", "--connection", "zones",
			"--requisite", "zone=zone1", "--requisite", "zone=zone2", "--requisite", "zone=zone3", "--preferred", "zone=zone3", "--preferred", "zone=zone1"},
			has: []string{"  member: nas-zone3\n", `member "nas-zone2" does not admit it, member "nas-zone3" does`}},
		{name: "no requirements", code: 0, args: []string{"--env", "ZONE=zone1", "--connection", "zones"},
			has: []string{"  member: nas-zone1\n", `  why: no requirements: the first member, "nas-zone1"`}},
		{name: "a zone no member serves", code: 1, args: []string{"--env", "ZONE=zone4", "--connection", "zones", "--node-term"}, has: []string{
			`  CreateVolume: ResourceExhausted: topology {org.democratic-csi.topology/zone=zone4} (requisite) is not accessible for any member of group "zones": member "nas-zone1" offers [{org.democratic-csi.topology/zone=zone1}]; member "nas-zone2" offers [{org.democratic-csi.topology/zone=zone2}]; member "nas-zone3" offers [{org.democratic-csi.topology/zone=zone3}]`,
		}},
		{name: "a missing member that is needed", code: 1, args: []string{"--env", "ZONE=zone2", "--connection", "missing-member", "--node-term"}, has: []string{
			`  member 1 "nas-zone4": connection not found: connection "nas-zone4" has no file ` + d + `nas-zone4.yaml`,
			`  CreateVolume: FailedPrecondition: group "missing-member": member "nas-zone4" (group.members[1]): connection not found`,
			`  member 2 "nas-zone2": not needed`,
		}},
		{name: "a missing member that is not needed", code: 0, args: []string{"--env", "ZONE=zone1", "--connection", "missing-member", "--node-term"},
			has: []string{"  member: nas-zone1\n", `  member 1 "nas-zone4": not needed`}},
		// The server refuses a group that lists itself whatever the claim
		// (its file is invalid), as the dry run does any invalid file.
		{name: "a group that lists itself", code: 2, args: []string{"--env", "ZONE=zone1", "--connection", "nested-self", "--node-term"},
			stderr: []string{`connection file is invalid: connection "nested-self": file ` + d + `nested-self.yaml: group.members[3]: the group "nested-self" lists itself`}},
		{name: "the fallback member without topology", code: 0, args: []string{"--env", "ZONE=zone9", "--connection", "with-fallback", "--node-term"},
			has: []string{`  member 2 "nfs-anywhere" (` + d + `nfs-anywhere.yaml) offers every node`, "  member: nfs-anywhere\n",
				"  accessible_topology: [{org.democratic-csi.topology/zone=zone9}]\n"}},
		{name: "--node-term with terms", code: 2, args: []string{"--env", "ZONE=zone1", "--connection", "zones", "--node-term", "--requisite", "zone=zone1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runTopology(t, append(base, tc.args...)...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\n%s%s", code, tc.code, stdout, stderr)
			}
			for _, s := range tc.has {
				if !strings.Contains(stdout, s) {
					t.Errorf("output lacks %q:\n%s", s, stdout)
				}
			}
			for _, s := range tc.stderr {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, stderr)
				}
			}
		})
	}
}
