package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/protojson"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/democratic-csi/proxy-topology/internal/csiclient"
	"github.com/democratic-csi/proxy-topology/internal/testbin"
)

const zoneMain = `driver: proxy
proxy:
  nodeTopology:
    type: zone
    fromRegexp:
    - topologyKey: zone
      source: nodeName
      regex: "node-([0-9]+)"
      template: "zone{match:1}"
`

func zoneConnection(base string) string {
	return `driver: local-hostpath
local-hostpath:
  shareBasePath: ` + base + `
proxy:
  perDriver:
    topology:
    - requirements:
        zone: zone1
`
}

// TestCLICreateListDelete drives a proxy served by Serve through the CLI,
// parsing its JSON output the way a script would.
func TestCLICreateListDelete(t *testing.T) {
	s := startServe(t, zoneMain, map[string]string{"zone1": zoneConnection(t.TempDir())})

	code, out, errOut := runCSI(t, s.Endpoint, "-o", "json", "create-volume", "--name", "pvc-1", "--connection", "zone1",
		"--requisite", "zone=zone1", "--size", "1Gi", "--fs-type", "ext4")
	if code != 0 {
		t.Fatalf("create-volume: exit %d: %s", code, errOut)
	}
	var created csi.CreateVolumeResponse
	if err := protojson.Unmarshal([]byte(out), &created); err != nil {
		t.Fatalf("create-volume output is not a CreateVolumeResponse: %v\n%s", err, out)
	}
	id := created.GetVolume().GetVolumeId()
	if !strings.HasPrefix(id, "v:zone1/") || created.GetVolume().GetCapacityBytes() != 1<<30 {
		t.Errorf("created %v", created.GetVolume())
	}
	if got := csiclient.FormatTerms(created.GetVolume().GetAccessibleTopology()); got != "[{org.democratic-csi.topology/zone=zone1}]" {
		t.Errorf("accessible_topology %s", got)
	}

	// A second volume and a page size of 1: list follows next_token.
	if code, _, errOut := runCSI(t, s.Endpoint, "create-volume", "--name", "pvc-2", "--connection", "zone1"); code != 0 {
		t.Fatalf("create-volume pvc-2: exit %d: %s", code, errOut)
	}
	code, out, errOut = runCSI(t, s.Endpoint, "list-volumes", "--max", "1", "-o", "json")
	if code != 0 {
		t.Fatalf("list-volumes: exit %d: %s", code, errOut)
	}
	var list csi.ListVolumesResponse
	if err := protojson.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("list-volumes output: %v\n%s", err, out)
	}
	var ids []string
	for _, e := range list.GetEntries() {
		ids = append(ids, e.GetVolume().GetVolumeId())
	}
	if len(ids) != 2 || !contains(ids, id) || list.GetNextToken() != "" {
		t.Errorf("listed %v (next %q), want 2 volumes including %s", ids, list.GetNextToken(), id)
	}
	code, out, _ = runCSI(t, s.Endpoint, "list-volumes", "--max", "1")
	if code != 0 || !strings.HasSuffix(out, "2 volumes (2 pages)\n") || !strings.Contains(out, id) {
		t.Errorf("list-volumes text: exit %d\n%s", code, out)
	}

	for _, v := range ids {
		if code, out, errOut := runCSI(t, s.Endpoint, "delete-volume", "--volume", v); code != 0 || out != "deleted volume "+v+"\n" {
			t.Errorf("delete-volume %s: exit %d %q %s", v, code, out, errOut)
		}
	}
	code, out, _ = runCSI(t, s.Endpoint, "-o", "json", "list-volumes")
	list.Reset()
	if err := protojson.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list.GetEntries()) != 0 {
		t.Errorf("list after delete: exit %d %v %s", code, err, out)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestCLIExitCodes: 0 ok (help too), 1 the RPC failed (code and message
// on stderr), 2 usage (the message, then the usage, on stderr).
func TestCLIExitCodes(t *testing.T) {
	s := startServe(t, zoneMain, map[string]string{"zone1": zoneConnection(t.TempDir())})
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout string // exact, when set
		stderr string // substring
	}{
		{name: "topology not offered", code: 1,
			args:   []string{"create-volume", "--name", "x", "--connection", "zone1", "--requisite", "zone=zone2"},
			stderr: `proxy-topology csi: CreateVolume failed: RESOURCE_EXHAUSTED: topology {org.democratic-csi.topology/zone=zone2} (requisite) is not accessible for connection "zone1"`},
		{name: "missing connection", code: 1,
			args:   []string{"create-volume", "--name", "x", "--connection", "nope"},
			stderr: `CreateVolume failed: FAILED_PRECONDITION: connection not found: connection "nope" has no file`},
		{name: "full keys are used verbatim", code: 1,
			args:   []string{"create-volume", "--name", "x", "--connection", "zone1", "--requisite", "org.democratic-csi.topology/zone=zone9"},
			stderr: "RESOURCE_EXHAUSTED: topology {org.democratic-csi.topology/zone=zone9}"},
		{name: "foreign volume id", code: 1, args: []string{"get-volume", "--volume", "pvc-123"}, stderr: "ControllerGetVolume failed: NOT_FOUND: volume_id:"},
		{name: "delete of a foreign id is idempotent", code: 0, args: []string{"delete-volume", "--volume", "pvc-123"}, stdout: "deleted volume pvc-123\n"},
		{name: "the positional id is deprecated", code: 0, args: []string{"delete-volume", "pvc-123"}, stdout: "deleted volume pvc-123\n",
			stderr: "warning: delete-volume ID is deprecated and goes in the next release; use delete-volume --volume ID\n"},
		{name: "capacity outside the connection's topology", code: 0,
			args: []string{"get-capacity", "--connection", "zone1", "--topology", "zone=zone2"}, stdout: "available_capacity:  0\n"},
		{name: "capacity as json", code: 0,
			args: []string{"-o", "json", "get-capacity", "--connection", "zone1", "--topology", "zone=zone2"}, stdout: "{}\n"},
		{name: "node-info", code: 0, args: []string{"node-info"},
			stdout: "node_id:               node-1\nmax_volumes_per_node:  0 (no limit)\naccessible_topology:   org.democratic-csi.topology/zone=zone1\n"},
		{name: "info", code: 0, args: []string{"info"}, stdout: "name:                     org.democratic-csi.proxy-topology\n" +
			"version:                  " + buildVersion() + "\n" +
			"ready:                    true\n" +
			"plugin capabilities:      CONTROLLER_SERVICE, VOLUME_ACCESSIBILITY_CONSTRAINTS, VOLUME_EXPANSION_ONLINE\n"},
		{name: "no command", code: 2, args: nil, stderr: "proxy-topology csi: a command is required\n\nUsage:\n  proxy-topology csi [flags]\n  proxy-topology csi [command]\n"},
		{name: "unknown command", code: 2, args: []string{"explode"}, stderr: `proxy-topology csi: unknown command "explode"`},
		{name: "misspelt command", code: 2, args: []string{"node-inf"}, stderr: `unknown command "node-inf"; did you mean node-info?`},
		{name: "unknown flag", code: 2, args: []string{"info", "--nope"}, stderr: "proxy-topology csi info: unknown flag: --nope\n\nUsage:"},
		{name: "missing name", code: 2, args: []string{"create-volume"}, stderr: "proxy-topology csi create-volume: --name is required\n\nUsage:\n  proxy-topology csi create-volume --name N"},
		{name: "bad size", code: 2, args: []string{"create-volume", "--name", "x", "--size", "lots"}, stderr: `"lots": want a size like 1Gi`},
		{name: "bad term", code: 2, args: []string{"create-volume", "--name", "x", "--requisite", "zone"}, stderr: `--requisite: "zone": want k=v,k=v`},
		{name: "bad access mode", code: 2, args: []string{"create-volume", "--name", "x", "--access-mode", "rwx"}, stderr: `--access-mode "rwx" is not a CSI access mode`},
		{name: "delete without id", code: 2, args: []string{"delete-volume"}, stderr: "proxy-topology csi delete-volume: --volume is required\n\nUsage:\n  proxy-topology csi delete-volume --volume ID"},
		{name: "zero timeout", code: 2, args: []string{"--timeout", "0", "info"}, stderr: "proxy-topology csi info: --timeout 0s: want a positive duration"},
		{name: "negative timeout", code: 2, args: []string{"create-volume", "--name", "x", "--connection", "zone1", "--timeout=-1s"}, stderr: "--timeout -1s: want a positive duration"},
		{name: "one key twice in a term", code: 2, args: []string{"create-volume", "--name", "x", "--connection", "zone1", "--requisite", "zone=zone1,zone=zone2"},
			stderr: `--requisite: "zone=zone1,zone=zone2": key org.democratic-csi.topology/zone twice`},
		{name: "bad output", code: 2, args: []string{"-o", "yaml", "info"}, stderr: `-o "yaml": want text or json`},
		{name: "shared flags after the command", code: 0, args: []string{"get-capacity", "--connection", "zone1", "--topology", "zone=zone2", "--output", "json"}, stdout: "{}\n"},
		{name: "-o spelt --o", code: 0, args: []string{"get-capacity", "--connection", "zone1", "--topology", "zone=zone2", "--o=json"}, stdout: "{}\n"},
		{name: "repeated params, the last wins", code: 1,
			args:   []string{"create-volume", "--name", "x", "--param", "connection=zone1", "--param", "connection=nope"},
			stderr: `connection "nope" has no file`},
		{name: "help", code: 0, args: []string{"publish", "-h"}, stdout: "", stderr: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCSI(t, s.Endpoint, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, out, errOut)
			}
			if tc.name == "info" {
				out = strings.Join(strings.SplitAfter(out, "\n")[:4], "")
			}
			if tc.name == "help" {
				if !strings.Contains(out, "Usage:\n  proxy-topology csi publish --volume ID --target PATH") || !strings.Contains(out, "--readonly") || errOut != "" {
					t.Errorf("help: stdout %q, stderr %q", out, errOut)
				}
				return
			}
			if tc.stdout != "" && out != tc.stdout {
				t.Errorf("stdout:\n%q\nwant:\n%q", out, tc.stdout)
			}
			if !strings.Contains(errOut, tc.stderr) {
				t.Errorf("stderr %q does not contain %q", errOut, tc.stderr)
			}
		})
	}

	t.Run("socket not there", func(t *testing.T) {
		code, _, errOut := runCSI(t, "unix:///nonexistent/csi.sock", "--timeout", "2s", "info")
		if code != 1 || !strings.Contains(errOut, "GetPluginInfo failed: UNAVAILABLE") {
			t.Errorf("exit %d: %s", code, errOut)
		}
	})
	t.Run("endpoint from CSI_ENDPOINT", func(t *testing.T) {
		t.Setenv("CSI_ENDPOINT", s.Endpoint)
		var out, errb strings.Builder
		if code := run([]string{"csi", "node-info"}, &out, &errb); code != 0 {
			t.Errorf("exit %d: %s", code, errb.String())
		}
	})
}

// TestCLINodeCommands stages, publishes, unpublishes and unstages a real
// bind mount (root only: the built-in driver mounts).
func TestCLINodeCommands(t *testing.T) {
	testbin.RequireRoot(t, "the built-in driver bind-mounts the volume")
	// local-hostpath.stage: this test once appended it under proxy:,
	// where it was silently ignored; an unknown key there now fails.
	var conn map[string]any
	if err := yaml.Unmarshal([]byte(zoneConnection(t.TempDir())), &conn); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(conn, true, "local-hostpath", "stage"); err != nil {
		t.Fatal(err)
	}
	staged, err := yaml.Marshal(conn)
	if err != nil {
		t.Fatal(err)
	}
	s := startServe(t, zoneMain, map[string]string{"zone1": string(staged)})
	code, out, errOut := runCSI(t, s.Endpoint, "-o", "json", "create-volume", "--name", "pvc-node", "--connection", "zone1")
	if code != 0 {
		t.Fatalf("create-volume: %s", errOut)
	}
	var created csi.CreateVolumeResponse
	if err := protojson.Unmarshal([]byte(out), &created); err != nil {
		t.Fatal(err)
	}
	id := created.GetVolume().GetVolumeId()
	dir := t.TempDir()
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	if err := os.MkdirAll(staging, 0o750); err != nil {
		t.Fatal(err)
	}
	steps := [][]string{
		{"stage", "--volume", id, "--staging", staging},
		{"publish", "--volume", id, "--staging", staging, "--target", target, "--readonly"},
		{"unpublish", "--volume", id, "--target", target},
		{"unstage", "--volume", id, "--staging", staging},
		{"delete-volume", "--volume", id},
	}
	want := []string{
		"staged volume " + id + " at " + staging + "\n",
		"published volume " + id + " at " + target + "\n",
		"unpublished volume " + id + " from " + target + "\n",
		"unstaged volume " + id + " from " + staging + "\n",
		"deleted volume " + id + "\n",
	}
	for i, args := range steps {
		code, out, errOut := runCSI(t, s.Endpoint, args...)
		if code != 0 || out != want[i] {
			t.Fatalf("%s: exit %d %q %s", args[0], code, out, errOut)
		}
		if args[0] == "publish" {
			mi, _ := os.ReadFile("/proc/self/mountinfo")
			if !strings.Contains(string(mi), target+" ro,") {
				t.Errorf("%s is not mounted read-only", target)
			}
		}
	}
}

// TestCLIStageWithoutStaging: on a connection whose upstream does not
// stage (local-hostpath without stage), NodeStageVolume answers OK without
// a call (SPEC §6), and `csi stage` says that nothing was staged, naming
// the connection, instead of "staged volume … at …"; with -o json stdout
// keeps the response alone and the note goes to stderr. The staging path
// is not created.
func TestCLIStageWithoutStaging(t *testing.T) {
	s := startServe(t, zoneMain, map[string]string{"zone1": zoneConnection(t.TempDir())})
	code, out, errOut := runCSI(t, s.Endpoint, "create-volume", "--name", "pvc-nostage", "--connection", "zone1")
	if code != 0 {
		t.Fatalf("create-volume: exit %d %s", code, errOut)
	}
	id := strings.Fields(strings.SplitN(out, "\n", 2)[0])[2]
	staging := filepath.Join(t.TempDir(), "staging")
	code, out, errOut = runCSI(t, s.Endpoint, "stage", "--volume", id, "--staging", staging)
	want := "volume " + id + ` was not staged: the node service answered OK without staging, because connection "zone1"'s upstream does not stage (no STAGE_UNSTAGE_VOLUME; SPEC §6); nothing was mounted at ` + staging + ": publish it without --staging\n"
	if code != 0 || out != want {
		t.Errorf("stage: exit %d\n got %q\nwant %q\n%s", code, out, want, errOut)
	}
	code, out, errOut = runCSI(t, s.Endpoint, "-o", "json", "stage", "--volume", id, "--staging", staging)
	if code != 0 || strings.TrimSpace(out) != "{}" || !strings.Contains(errOut, `note: volume `+id+` was not staged: connection "zone1"'s upstream does not stage`) {
		t.Errorf("stage -o json: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, err := os.Stat(staging); !os.IsNotExist(err) {
		t.Errorf("staging path: %v, want none", err)
	}
}
