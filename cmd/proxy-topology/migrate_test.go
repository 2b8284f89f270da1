package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMigrateCommand: values to stdout and notes to stderr, exit 0; a
// refused driver exits 1 naming it with nothing on stdout; wrong flags
// and unreadable files exit 2; --check exits 1 for an unserved handle.
func TestMigrateCommand(t *testing.T) {
	td := filepath.Join("..", "..", "internal", "migrate", "testdata")
	values, conns := filepath.Join(td, "values.yaml"), filepath.Join(td, "connections")
	bad := t.TempDir()
	for name, text := range map[string]string{"ok.yaml": "driver: nfs-client\nnfs: {shareHost: h}\n", "eph.yaml": "driver: zfs-local-ephemeral-inline\n"} {
		if err := os.WriteFile(filepath.Join(bad, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pvs := filepath.Join(t.TempDir(), "pvs.json")
	if err := os.WriteFile(pvs, []byte(`{"kind": "List", "items": [
 {"kind": "PersistentVolume", "metadata": {"name": "a"}, "spec": {"csi": {"driver": "org.democratic-csi.proxy-topology", "volumeHandle": "v:local/x"}}},
 {"kind": "PersistentVolume", "metadata": {"name": "b"}, "spec": {"csi": {"driver": "org.democratic-csi.proxy-topology", "volumeHandle": "v:old-nas/y"}}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name           string
		args           []string
		code           int
		stdout, stderr string
		emptyStdout    bool
	}{
		{"example", []string{"--values", values, "--connections", conns}, 0, "upstreams:", "wrote values for org.democratic-csi.proxy-topology: 3 connections (1 node-local)", false},
		{"refused", []string{"--values", values, "--connections", bad}, 1, "", "connection eph: driver zfs-local-ephemeral-inline cannot run as an upstream", true},
		{"no connections flag", []string{"--values", values}, 2, "", "--values and --connections are required", true},
		{"missing file", []string{"--values", filepath.Join(bad, "nope.yaml"), "--connections", conns}, 2, "", "--values: open", true},
		{"check", []string{"--values", values, "--connections", conns, "--check", pvs}, 1, "served by connection local, upstreams.local", "1 object of org.democratic-csi.proxy-topology not served after the switch", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"migrate"}, tc.args...), &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.code, stderr.String())
			}
			if !strings.Contains(stdout.String(), tc.stdout) || tc.emptyStdout && stdout.Len() > 0 {
				t.Errorf("stdout lacks %q (or is not empty):\n%s", tc.stdout, stdout.String())
			}
			if !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.stderr, stderr.String())
			}
		})
	}
}
