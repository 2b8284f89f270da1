package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// nodeNameMain reports a zone only from the node name, so the node name
// the dry run uses decides whether the node has a segment.
const nodeNameMain = `driver: proxy
proxy:
  nodeTopology:
    type: zone
    fromRegexp:
    - topologyKey: zone
      source: nodeName
      regex: "node-([0-9]+)"
      template: "zone{match:1}"
`

// writeDryRunConfig writes nodeNameMain with its folder at dir/connections
// and returns the config's path.
func writeDryRunConfig(t *testing.T, dir string) string {
	t.Helper()
	folder := filepath.Join(dir, "connections")
	if err := os.MkdirAll(folder, 0o750); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "proxy.yaml")
	writeMainConfig(t, cfg, nodeNameMain, folder)
	return cfg
}

func runTopology(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(append([]string{"topology"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// TestTopologyNodeNameDefault: without --node-name the dry run sees the
// node name serve would use as its node id (CSI_NODE_ID, then NODE_NAME,
// then the hostname), not an empty one that no nodeName rule can match.
func TestTopologyNodeNameDefault(t *testing.T) {
	cfg := writeDryRunConfig(t, t.TempDir())
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, csiNodeID, nodeName string
		want                      string
	}{
		{name: "NODE_NAME", nodeName: "node-7", want: `node "node-7"`},
		{name: "CSI_NODE_ID wins", csiNodeID: "node-3", nodeName: "node-7", want: `node "node-3"`},
		{name: "hostname", want: `node "` + host + `"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CSI_NODE_ID", tc.csiNodeID)
			t.Setenv("NODE_NAME", tc.nodeName)
			code, out, errOut := runTopology(t, "--config", cfg)
			if !strings.HasPrefix(out, tc.want+" ") {
				t.Errorf("dry run of %s:\n%s%s", tc.want, out, errOut)
			}
			if tc.nodeName == "" {
				return // the hostname may or may not match the rule
			}
			if code != 0 {
				t.Errorf("exit %d, want 0 (the node has a segment)\n%s%s", code, out, errOut)
			}
		})
	}
	t.Run("the flag wins", func(t *testing.T) {
		t.Setenv("NODE_NAME", "node-7")
		code, out, _ := runTopology(t, "--config", cfg, "--node-name", "db-1")
		if code != 1 || !strings.HasPrefix(out, `node "db-1" `) {
			t.Errorf("exit %d, want 1 for a node no rule matches:\n%s", code, out)
		}
	})
}

// TestTopologyConnectionName: the dry run refuses a connection name the
// server refuses, with the server's code and message, even when a file
// happens to exist at the path the name would make.
func TestTopologyConnectionName(t *testing.T) {
	dir := t.TempDir()
	cfg := writeDryRunConfig(t, dir)
	conn := "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: " + filepath.Join(dir, "data") + "\n"
	for _, p := range []string{"connections/z1.yaml", "c/z1.yaml"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(conn), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("CSI_NODE_ID", "")
	for _, tc := range []struct {
		connection string
		code       int
		want       string
	}{
		{"z1", 0, "  CreateVolume: OK\n"},
		{"../c/z1", 1, `  CreateVolume: InvalidArgument: invalid connection name: connection name "../c/z1" has invalid character '.' at byte 0`},
		{".hidden", 1, `  CreateVolume: InvalidArgument: invalid connection name: connection name ".hidden" has invalid character '.' at byte 0`},
	} {
		t.Run(tc.connection, func(t *testing.T) {
			code, out, errOut := runTopology(t, "--config", cfg, "--node-name", "node-1", "--connection", tc.connection)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d, want %d and %q in:\n%s%s", code, tc.code, tc.want, out, errOut)
			}
		})
	}
}

// TestTopologyTermKeyTwice: the dry run reads terms as the csi client
// does: a key twice in one term is a usage error naming the flag and the
// key, never a term that silently keeps the last value.
func TestTopologyTermKeyTwice(t *testing.T) {
	cfg := writeDryRunConfig(t, t.TempDir())
	for _, tc := range []struct{ flag, want string }{
		{"--requisite", `--requisite: "zone=zone1,zone=zone2": key org.democratic-csi.topology/zone twice`},
		{"--preferred", `--preferred: "zone=zone1,zone=zone2": key org.democratic-csi.topology/zone twice`},
		{"--upstream-answer", `--upstream-answer: "zone=zone1,zone=zone2": key zone twice`},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			code, out, errOut := runTopology(t, "--config", cfg, "--node-name", "node-1", tc.flag, "zone=zone1,zone=zone2")
			if code != 2 || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, want 2 and %q:\n%s%s", code, tc.want, out, errOut)
			}
		})
	}
}
