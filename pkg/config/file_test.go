package config

import (
	"strings"
	"testing"
)

// TestParseFile: one decoding gives a group for driver: group and a
// connection for anything else, each with its own parser's errors.
func TestParseFile(t *testing.T) {
	topo := topoOpts
	f, err := ParseFile("g.yaml", []byte("driver: group\ngroup:\n  members: [a, b]\n"), topo)
	if err != nil || f.Group == nil || f.Connection != nil || len(f.Group.Group.Members) != 2 {
		t.Fatalf("group file: %+v, %v", f, err)
	}
	f, err = ParseFile("c.yaml", []byte("driver: csi\ncsi:\n  endpoint: unix:///s\n  endpont: x\n"), topo)
	if err != nil || f.Connection == nil || f.Group != nil || f.Connection.CSI.Endpoint != "unix:///s" {
		t.Fatalf("connection file: %+v, %v", f, err)
	}
	if want := []string{"file c.yaml: unknown key csi.endpont (ignored)"}; len(f.Warnings) != 1 || f.Warnings[0] != want[0] {
		t.Errorf("warnings %q, want %q", f.Warnings, want)
	}
	for _, tt := range []struct{ yml, want string }{
		{"driver: group\ngroup:\n  members: [a]\ncsi: {}\n", "csi: not a key of a group file"},
		{"driver: group\ngroup: {members: [a]}\n---\ndriver: csi\n", "a second YAML document"},
		{"driver: csi\ncsi: {endpoint: unix:///s}\n---\ndriver: group\n", "a second YAML document"},
		{"driver: [csi\n", "yaml:"},
		{"", "driver: required"},
	} {
		if _, err := ParseFile("x.yaml", []byte(tt.yml), topo); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want one containing %q", tt.yml, err, tt.want)
		}
	}
}
