package config

import (
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.yaml.in/yaml/v3"
)

// Unknown keys in the main config: warnings at the top level, errors under
// proxy: (where a misspelt key would silently change what the proxy does).

func TestLoadMainUnknownKeys(t *testing.T) {
	warn := func(key string) string { return "config " + testFile + ": unknown key " + key + " (ignored)" }
	tests := []struct {
		name string
		yml  string
		want []string
	}{
		{
			name: "top level",
			yml:  minimal + "drivr: proxy\n",
			want: []string{warn("drivr")},
		},
		{
			name: "unknown section with nested keys names each leaf",
			yml:  minimal + "metrics:\n  http:\n    port: 9000\n",
			want: []string{warn("metrics.http.port")},
		},
		{
			name: "outside proxy: sorted by key",
			yml:  "zzz: 1\n" + minimal + "local-hostpath:\n  basePath: /x\n",
			want: []string{warn("local-hostpath.basePath"), warn("zzz")},
		},
		{
			name: "capabilities: auto is a known value",
			yml:  minimal + "  capabilities: auto\n  maxIdLength: 128\n",
		},
		{
			name: "empty sections are known keys",
			yml:  minimal + "  nodeTopology: {}\n  capabilities: {}\nlocal-hostpath:\n",
		},
		{
			name: "null section is a known key",
			yml:  "driver: proxy\nproxy:\n  configFolder: /c\n  nodeTopology:\n",
		},
		{
			name: "empty lists are known keys",
			yml:  minimal + "  nodeTopology:\n    fromRegexp: []\n  capabilities:\n    controller: []\n",
		},
		{
			name: "local-hostpath settings are known even when driver is proxy",
			yml:  minimal + "local-hostpath:\n  shareBasePath: /x\n  stage: true\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := loadMain(tt.yml)
			if err != nil {
				t.Fatalf("unknown keys must not be fatal: %v", err)
			}
			if diff := cmp.Diff(tt.want, l.Warnings, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Warnings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLoadMainUnknownProxyKeys: an unknown key under proxy: is an error
// naming the key path, in the file and in every fromRegexp rule; the
// config does not load.
func TestLoadMainUnknownProxyKeys(t *testing.T) {
	why := ": unknown key under proxy: (a misspelt key there would silently change what the proxy does, so it is an error, not a warning)"
	tests := []struct {
		name string
		yml  string
		want []string
	}{
		{"nested, wrong case", minimal + "  configfolder: /y\n", []string{"proxy.configfolder"}},
		{"misspelt section", minimal + "  nodeTopolgy:\n    type: zone\n", []string{"proxy.nodeTopolgy.type"}},
		{"inside nodeTopology", minimal + "  nodeTopology:\n    typ: zone\n", []string{"proxy.nodeTopology.typ"}},
		{"inside capabilities", minimal + "  capabilities:\n    controler: [GET_CAPACITY]\n", []string{"proxy.capabilities.controler"}},
		{
			"inside a fromRegexp rule",
			minimal + "  nodeTopology:\n    fromRegexp:\n    - topologyKey: zone\n      source: nodeName\n    - topologyKey: region\n      source: env\n      envName: REGION\n      regexp: \"(.*)\"\n      templte: x\n",
			[]string{"proxy.nodeTopology.fromRegexp[1].regexp", "proxy.nodeTopology.fromRegexp[1].templte"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadMain(tt.yml)
			if err == nil {
				t.Fatal("an unknown key under proxy: must be an error")
			}
			var lines []string
			for _, k := range tt.want {
				lines = append(lines, k+why)
			}
			if want := "config " + testFile + ": " + strings.Join(lines, "\n"); err.Error() != want {
				t.Errorf("error:\n%s\nwant:\n%s", err, want)
			}
		})
	}
}

// Main has no map-valued key today; the rule that a map's own keys are
// free-form is checked on a struct that has one. An untagged field is no
// key.
func TestUnknownKeysMapLeaf(t *testing.T) {
	type section struct {
		Labels map[string]string `koanf:"labels"`
		Name   string            `koanf:"name"`
	}
	type root struct {
		Section  section `koanf:"section"`
		Untagged string
	}
	var keys []string
	for _, f := range schemaOf(reflect.TypeOf(root{})).fields {
		keys = append(keys, f.key)
	}
	if diff := cmp.Diff([]string{"section"}, keys); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
	var doc yaml.Node
	yml := "section:\n  labels:\n    topology.kubernetes.io/zone: z\n    a: b\n  name: n\n  labelsx: {a: b}\nUntagged: u\n"
	if err := yaml.Unmarshal([]byte(yml), &doc); err != nil {
		t.Fatal(err)
	}
	var got root
	d := decodeNode(&doc, &got, decodeRules{weak: true, leaves: true})
	var unknown []string
	for _, u := range d.unknown {
		unknown = append(unknown, u.path())
	}
	if diff := cmp.Diff([]string{"Untagged", "section.labelsx.a"}, unknown); diff != "" {
		t.Errorf("unknown keys (-want +got):\n%s", diff)
	}
	want := root{Section: section{Labels: map[string]string{"topology.kubernetes.io/zone": "z", "a": "b"}, Name: "n"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decoded (-want +got):\n%s", diff)
	}
	// A map's own keys are free-form, but its values still have a shape.
	if err := yaml.Unmarshal([]byte("section:\n  name:\n    x: 1\n"), &doc); err != nil {
		t.Fatal(err)
	}
	d = decodeNode(&doc, &root{}, decodeRules{weak: true, leaves: true})
	if len(d.unknown) != 0 || len(d.shape) != 1 {
		t.Errorf("name.x: unknown %v, shape errors %v; want one shape error", d.unknown, d.shape)
	}
}
