package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/democratic-csi/proxy-topology/pkg/nodetopology"
)

// testFile is the name every in-memory main config is loaded as; messages
// must name it.
const testFile = "test-proxy.yaml"

// minimal is the smallest valid main config.
const minimal = "proxy:\n  configFolder: /mnt/connections\n"

func loadMain(yml string, environ ...string) (*Loaded, error) {
	return LoadMain(testFile, []byte(yml), environ)
}

// mainErrors checks that err names testFile and splits it into one string
// per problem (errors.Join puts each on its own line).
func mainErrors(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	msg, ok := strings.CutPrefix(err.Error(), "config "+testFile+": ")
	if !ok {
		t.Fatalf("error %q does not start with %q", err, "config "+testFile+": ")
	}
	return strings.Split(msg, "\n")
}

func TestLoadMainMinimal(t *testing.T) {
	l, err := loadMain(minimal)
	if err != nil {
		t.Fatal(err)
	}
	want := Main{
		Driver: DriverProxy,
		Proxy:  Proxy{ConfigFolder: "/mnt/connections", CacheTimeoutMinutes: 60},
	}
	if diff := cmp.Diff(want, l.Main); diff != "" {
		t.Errorf("Main (-want +got):\n%s", diff)
	}
	if l.File != testFile {
		t.Errorf("File = %q, want %q", l.File, testFile)
	}
	if len(l.Warnings) != 0 {
		t.Errorf("Warnings = %q, want none", l.Warnings)
	}
	if l.Topology == nil {
		t.Error("Topology is nil; proxy.nodeTopology must be compiled for driver proxy")
	}
}

func TestLoadMainValues(t *testing.T) {
	tests := []struct {
		name string
		yml  string
		want Main
	}{
		{
			name: "cacheTimeoutMinutes unset means 60",
			yml:  minimal,
			want: Main{Driver: DriverProxy, Proxy: Proxy{ConfigFolder: "/mnt/connections", CacheTimeoutMinutes: 60}},
		},
		{
			name: "cacheTimeoutMinutes null means 60",
			yml:  minimal + "  cacheTimeoutMinutes: null\n",
			want: Main{Driver: DriverProxy, Proxy: Proxy{ConfigFolder: "/mnt/connections", CacheTimeoutMinutes: 60}},
		},
		{
			name: "cacheTimeoutMinutes 0 is kept: no cache",
			yml:  minimal + "  cacheTimeoutMinutes: 0\n",
			want: Main{Driver: DriverProxy, Proxy: Proxy{ConfigFolder: "/mnt/connections", CacheTimeoutMinutes: 0}},
		},
		{
			name: "cacheTimeoutMinutes -1 is kept: forever",
			yml:  minimal + "  cacheTimeoutMinutes: -1\n",
			want: Main{Driver: DriverProxy, Proxy: Proxy{ConfigFolder: "/mnt/connections", CacheTimeoutMinutes: -1}},
		},
		{
			name: "whole float is an integer",
			yml:  minimal + "  cacheTimeoutMinutes: 5.0\n",
			want: Main{Driver: DriverProxy, Proxy: Proxy{ConfigFolder: "/mnt/connections", CacheTimeoutMinutes: 5}},
		},
		{
			name: "explicit driver proxy",
			yml:  "driver: proxy\n" + minimal,
			want: Main{Driver: DriverProxy, Proxy: Proxy{ConfigFolder: "/mnt/connections", CacheTimeoutMinutes: 60}},
		},
		{
			name: "every proxy option",
			yml: `csiName: example.com.csi
proxy:
  configFolder: /c
  defaultConnection: nfs.zone1
  cacheTimeoutMinutes: 5
  maxVolumesPerNode: 7
  controllerPublish: true
  capabilities:
    controller: [CREATE_DELETE_VOLUME]
    node: [STAGE_UNSTAGE_VOLUME]
  nodeTopology:
    type: node
    prefix: example.com
    fromRegexp:
    - topologyKey: zone
      source: env
      envName: ZONE
      regex: "(z[0-9])"
      template: "{match:1}"
`,
			want: Main{
				Driver:  DriverProxy,
				CSIName: "example.com.csi",
				Proxy: Proxy{
					ConfigFolder:        "/c",
					DefaultConnection:   "nfs.zone1",
					CacheTimeoutMinutes: 5,
					MaxVolumesPerNode:   7,
					ControllerPublish:   true,
					Capabilities:        Capabilities{Controller: []string{"CREATE_DELETE_VOLUME"}, Node: []string{"STAGE_UNSTAGE_VOLUME"}},
					NodeTopology: nodetopology.Config{
						Type:   nodetopology.TypeNode,
						Prefix: "example.com",
						FromRegexp: []nodetopology.Rule{
							{TopologyKey: "zone", Source: nodetopology.SourceEnv, EnvName: "ZONE", Regex: "(z[0-9])", Template: "{match:1}"},
						},
					},
				},
			},
		},
		{
			name: "driver local-hostpath needs no proxy section",
			yml:  "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: /var/lib/x\n  stage: true\n  controllerPublish: true\n",
			want: Main{
				Driver:        DriverLocalHostpath,
				Proxy:         Proxy{CacheTimeoutMinutes: 60},
				LocalHostpath: LocalHostpath{ShareBasePath: "/var/lib/x", Stage: true, ControllerPublish: true},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := loadMain(tt.yml)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, l.Main, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Main (-want +got):\n%s", diff)
			}
			if len(l.Warnings) != 0 {
				t.Errorf("Warnings = %q, want none", l.Warnings)
			}
		})
	}
}

func TestLoadMainErrors(t *testing.T) {
	rules := func(second string) string {
		return minimal + "  nodeTopology:\n    fromRegexp:\n    - topologyKey: zone\n      source: nodeName\n" + second
	}
	tests := []struct {
		name string
		yml  string
		want []string
	}{
		{
			name: "empty file",
			yml:  "",
			want: []string{"proxy.configFolder: required for driver: proxy"},
		},
		{
			name: "configFolder missing",
			yml:  "driver: proxy\nproxy:\n  cacheTimeoutMinutes: 5\n",
			want: []string{"proxy.configFolder: required for driver: proxy"},
		},
		{
			name: "cacheTimeoutMinutes below -1",
			yml:  minimal + "  cacheTimeoutMinutes: -2\n",
			want: []string{"proxy.cacheTimeoutMinutes: -2 is invalid (0: no cache, -1: forever, N>0: minutes)"},
		},
		{
			name: "cacheTimeoutMinutes fraction",
			yml:  minimal + "  cacheTimeoutMinutes: 0.5\n",
			want: []string{"proxy.cacheTimeoutMinutes: 0.5 is not a whole number"},
		},
		{
			name: "cacheTimeoutMinutes not a number",
			yml:  minimal + "  cacheTimeoutMinutes: soon\n",
			want: []string{"decoding failed due to the following error(s):", "", "'proxy.cacheTimeoutMinutes' cannot parse value as 'int': strconv.ParseInt: invalid syntax"},
		},
		{
			name: "defaultConnection with a slash",
			yml:  minimal + "  defaultConnection: ../etc\n",
			want: []string{`proxy.defaultConnection: connection name "../etc" has invalid character '.' at byte 0 (allowed: letters, digits, and . _ - after the first)`},
		},
		{
			name: "defaultConnection too long",
			yml:  minimal + "  defaultConnection: " + strings.Repeat("a", 64) + "\n",
			want: []string{"proxy.defaultConnection: connection name is 64 bytes, longer than 63"},
		},
		{
			name: "maxVolumesPerNode negative",
			yml:  minimal + "  maxVolumesPerNode: -1\n",
			want: []string{"proxy.maxVolumesPerNode: -1 is negative"},
		},
		{
			name: "nodeTopology type",
			yml:  minimal + "  nodeTopology:\n    type: region\n",
			want: []string{`proxy.nodeTopology.type: "region" is not one of cluster, node, zone, custom`},
		},
		{
			name: "second rule's regex",
			yml:  rules("    - topologyKey: region\n      source: nodeName\n      regex: \"(\"\n"),
			want: []string{"proxy.nodeTopology.fromRegexp[1].regex: error parsing regexp: missing closing ) in `(`"},
		},
		{
			name: "second rule's source",
			yml:  rules("    - topologyKey: region\n      source: hostName\n"),
			want: []string{`proxy.nodeTopology.fromRegexp[1].source: "hostName" is not one of nodeName, hostname, env, file, nodeLabel`},
		},
		{
			name: "rule that is not a mapping",
			yml:  minimal + "  nodeTopology:\n    fromRegexp:\n    - zone\n",
			want: []string{"decoding failed due to the following error(s):", "", `'proxy.nodeTopology.fromRegexp[0]' expected a map or struct, got "string"`},
		},
		{
			name: "csiName",
			yml:  "csiName: -proxy\n" + minimal,
			want: []string{`csiName: "-proxy" is not a valid CSI driver name (alphanumerics, '-' and '.', starting and ending with an alphanumeric)`},
		},
		{
			name: "csiName too long",
			yml:  "csiName: " + strings.Repeat("a", 64) + "\n" + minimal,
			want: []string{`csiName: "` + strings.Repeat("a", 64) + `" must be 1 to 63 characters`},
		},
		{
			name: "driver csi belongs in a connection file",
			yml:  "driver: csi\n" + minimal,
			want: []string{"driver: csi is only valid in a connection file; the main config serves proxy or local-hostpath"},
		},
		{
			name: "unknown driver",
			yml:  "driver: nfs\n" + minimal,
			want: []string{`driver: "nfs" is not one of proxy, local-hostpath`},
		},
		{
			name: "driver is case sensitive",
			yml:  "driver: Proxy\n" + minimal,
			want: []string{`driver: "Proxy" is not one of proxy, local-hostpath`},
		},
		{
			name: "local-hostpath without shareBasePath",
			yml:  "driver: local-hostpath\n",
			want: []string{`local-hostpath.shareBasePath: must be an absolute path, got ""`},
		},
		{
			name: "local-hostpath relative shareBasePath",
			yml:  "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: var/lib/x\n",
			want: []string{`local-hostpath.shareBasePath: must be an absolute path, got "var/lib/x"`},
		},
		{
			name: "every problem at once, in a stable order",
			yml: `csiName: bad_name
proxy:
  cacheTimeoutMinutes: -5
  defaultConnection: .hidden
  maxVolumesPerNode: -3
  nodeTopology:
    type: nope
    fromRegexp:
    - topologyKey: zone
      source: nodeName
    - topologyKey: region
      source: nodeName
      regex: "("
`,
			want: []string{
				`csiName: "bad_name" is not a valid CSI driver name (alphanumerics, '-' and '.', starting and ending with an alphanumeric)`,
				"proxy.configFolder: required for driver: proxy",
				`proxy.defaultConnection: connection name ".hidden" has invalid character '.' at byte 0 (allowed: letters, digits, and . _ - after the first)`,
				"proxy.cacheTimeoutMinutes: -5 is invalid (0: no cache, -1: forever, N>0: minutes)",
				"proxy.maxVolumesPerNode: -3 is negative",
				`proxy.nodeTopology.type: "nope" is not one of cluster, node, zone, custom`,
				"proxy.nodeTopology.fromRegexp[1].regex: error parsing regexp: missing closing ) in `(`",
			},
		},
		{
			name: "fractions in two keys",
			yml:  minimal + "  cacheTimeoutMinutes: 1.5\n  maxVolumesPerNode: 2.5\n",
			want: []string{"proxy.cacheTimeoutMinutes: 1.5 is not a whole number", "proxy.maxVolumesPerNode: 2.5 is not a whole number"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := loadMain(tt.yml)
			if l != nil {
				t.Errorf("Loaded = %+v, want nil with an error", l.Main)
			}
			if diff := cmp.Diff(tt.want, mainErrors(t, err)); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

// A nodeTopology error keeps its type, so callers can find the key path
// without parsing the message.
func TestLoadMainTopologyFieldError(t *testing.T) {
	_, err := loadMain(minimal + "  nodeTopology:\n    prefix: Bad_Prefix\n")
	var fe *nodetopology.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v does not wrap a *nodetopology.FieldError", err)
	}
	if fe.Path != "proxy.nodeTopology.prefix" {
		t.Errorf("Path = %q, want proxy.nodeTopology.prefix", fe.Path)
	}
}

func TestLoadMainInvalidYAML(t *testing.T) {
	tests := []struct {
		name, yml, want string
	}{
		{"unclosed flow sequence", "driver: [proxy\n", "yaml: line 1: did not find expected ',' or ']'"},
		{"tab indentation", "proxy:\n\tconfigFolder: /x\n", "yaml: line 2: found character that cannot start any token"},
		{"scalar document", "proxy\n", "yaml: unmarshal errors:\n  line 1: cannot unmarshal !!str `proxy` into map[string]interface {}"},
		{"list document", "- proxy\n", "yaml: unmarshal errors:\n  line 1: cannot unmarshal !!seq into map[string]interface {}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadMain(tt.yml)
			if err == nil {
				t.Fatal("no error")
			}
			if want := "config " + testFile + ": " + tt.want; err.Error() != want {
				t.Errorf("error:\n%s\nwant:\n%s", err, want)
			}
		})
	}
}

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

// TestLoadMainCapabilitiesAndIDLength: proxy.capabilities is auto or a
// section; proxy.maxIdLength is 0 or a usable limit.
func TestLoadMainCapabilitiesAndIDLength(t *testing.T) {
	for _, tt := range []struct {
		name, yml, wantErr string
		want               Capabilities
		wantMax            int
	}{
		{name: "unset", yml: minimal},
		{name: "auto", yml: minimal + "  capabilities: auto\n"},
		{name: "lists", yml: minimal + "  capabilities:\n    controller: [CREATE_DELETE_VOLUME]\n    volumeExpansion: offline\n  maxIdLength: 128\n",
			want: Capabilities{Controller: []string{"CREATE_DELETE_VOLUME"}, VolumeExpansion: "offline"}, wantMax: 128},
		{name: "other string", yml: minimal + "  capabilities: all\n", wantErr: `proxy.capabilities: "all": want auto, or a section with controller, node and volumeExpansion`},
		{name: "bad expansion", yml: minimal + "  capabilities:\n    volumeExpansion: yes please\n", wantErr: `proxy.capabilities.volumeExpansion: "yes please" is not one of online, offline, none (or leave it out: auto)`},
		{name: "tiny limit", yml: minimal + "  maxIdLength: 5\n", wantErr: "proxy.maxIdLength: 5 is too small (0: no limit of the proxy's own; otherwise at least 16, e.g. 128, the CSI limit)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l, err := loadMain(tt.yml)
			if tt.wantErr != "" {
				if want := "config " + testFile + ": " + tt.wantErr; err == nil || err.Error() != want {
					t.Fatalf("error:\n%v\nwant:\n%s", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, l.Proxy.Capabilities, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Capabilities (-want +got):\n%s", diff)
			}
			if l.Proxy.MaxIDLength != tt.wantMax {
				t.Errorf("MaxIDLength = %d, want %d", l.Proxy.MaxIDLength, tt.wantMax)
			}
		})
	}
}

// Main has no map-valued key today; the rule that a map's own keys are
// free-form is checked on a struct that has one.
func TestKnownKeysMapLeaf(t *testing.T) {
	type section struct {
		Labels map[string]string `koanf:"labels"`
		Name   string            `koanf:"name"`
	}
	type root struct {
		Section  section `koanf:"section"`
		Untagged string
	}
	known := knownKeys(reflect.TypeOf(root{}), "")
	var keys []string
	for k := range known {
		keys = append(keys, k)
	}
	if diff := cmp.Diff([]string{"section", "section.labels", "section.name"}, keys, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("knownKeys (-want +got):\n%s", diff)
	}
	for key, want := range map[string]bool{
		"section.labels.topology.kubernetes.io/zone": true,
		"section.labels.a":                           true,
		"section.labels":                             false, // the map itself is a known key, not under it
		"section.name.x":                             false,
		"section.labelsx.a":                          false,
	} {
		if got := underLeaf(key, known); got != want {
			t.Errorf("underLeaf(%q) = %t, want %t", key, got, want)
		}
	}
}

func TestLoadMainEnv(t *testing.T) {
	base := Main{Driver: DriverProxy, Proxy: Proxy{ConfigFolder: "/mnt/connections", CacheTimeoutMinutes: 60}}
	with := func(f func(m *Main)) Main {
		m := base
		f(&m)
		return m
	}
	tests := []struct {
		name    string
		yml     string
		environ []string
		want    Main
	}{
		{
			name:    "string",
			yml:     minimal,
			environ: []string{"PROXY_TOPOLOGY_SET_PROXY__DEFAULTCONNECTION=nfs"},
			want:    with(func(m *Main) { m.Proxy.DefaultConnection = "nfs" }),
		},
		{
			name:    "env wins over the file",
			yml:     minimal,
			environ: []string{"PROXY_TOPOLOGY_SET_PROXY__CONFIGFOLDER=/elsewhere"},
			want:    with(func(m *Main) { m.Proxy.ConfigFolder = "/elsewhere" }),
		},
		{
			name:    "int",
			yml:     minimal,
			environ: []string{"PROXY_TOPOLOGY_SET_PROXY__CACHETIMEOUTMINUTES=5"},
			want:    with(func(m *Main) { m.Proxy.CacheTimeoutMinutes = 5 }),
		},
		{
			name:    "int -1",
			yml:     minimal,
			environ: []string{"PROXY_TOPOLOGY_SET_PROXY__CACHETIMEOUTMINUTES=-1"},
			want:    with(func(m *Main) { m.Proxy.CacheTimeoutMinutes = -1 }),
		},
		{
			name:    "int64",
			yml:     minimal,
			environ: []string{"PROXY_TOPOLOGY_SET_PROXY__MAXVOLUMESPERNODE=12"},
			want:    with(func(m *Main) { m.Proxy.MaxVolumesPerNode = 12 }),
		},
		{
			name:    "bool",
			yml:     minimal,
			environ: []string{"PROXY_TOPOLOGY_SET_PROXY__CONTROLLERPUBLISH=true"},
			want:    with(func(m *Main) { m.Proxy.ControllerPublish = true }),
		},
		{
			name:    "path parts are case-insensitive",
			yml:     minimal,
			environ: []string{"PROXY_TOPOLOGY_SET_proxy__defaultConnection=nfs", "PROXY_TOPOLOGY_SET_Proxy__CacheTimeoutMinutes=7"},
			want:    with(func(m *Main) { m.Proxy.DefaultConnection = "nfs"; m.Proxy.CacheTimeoutMinutes = 7 }),
		},
		{
			name:    "three levels deep",
			yml:     minimal,
			environ: []string{"PROXY_TOPOLOGY_SET_PROXY__NODETOPOLOGY__TYPE=node"},
			want:    with(func(m *Main) { m.Proxy.NodeTopology.Type = nodetopology.TypeNode }),
		},
		{
			name:    "dash in a key becomes underscore",
			yml:     "driver: local-hostpath\n",
			environ: []string{"PROXY_TOPOLOGY_SET_LOCAL_HOSTPATH__SHAREBASEPATH=/srv", "PROXY_TOPOLOGY_SET_LOCAL_HOSTPATH__STAGE=1"},
			want: Main{Driver: DriverLocalHostpath, Proxy: Proxy{CacheTimeoutMinutes: 60},
				LocalHostpath: LocalHostpath{ShareBasePath: "/srv", Stage: true}},
		},
		{
			name:    "env alone makes an empty file valid",
			yml:     "",
			environ: []string{"PROXY_TOPOLOGY_SET_PROXY__CONFIGFOLDER=/c", "PROXY_TOPOLOGY_SET_CSINAME=example.com"},
			want:    Main{Driver: DriverProxy, CSIName: "example.com", Proxy: Proxy{ConfigFolder: "/c", CacheTimeoutMinutes: 60}},
		},
		{
			name:    "empty value clears a string",
			yml:     "csiName: example.com\n" + minimal,
			environ: []string{"PROXY_TOPOLOGY_SET_CSINAME="},
			want:    base,
		},
		{
			name: "other variables are ignored",
			yml:  minimal,
			environ: []string{
				"PATH=/bin", "PROXY_TOPOLOGY_CONFIG=/x", "PROXY_TOPOLOGY_SET", "NOEQUALS",
				// The prefix itself is case-sensitive, like every env var.
				"proxy_topology_set_PROXY__CONFIGFOLDER=/ignored",
			},
			want: base,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := loadMain(tt.yml, tt.environ...)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, l.Main, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Main (-want +got):\n%s", diff)
			}
			if len(l.Warnings) != 0 {
				t.Errorf("Warnings = %q, want none", l.Warnings)
			}
		})
	}
}

// TestLoadMainEnvErrors: a bad override is blamed on the variable that
// carried it, never on the file, which may be perfectly fine.
func TestLoadMainEnvErrors(t *testing.T) {
	tests := []struct {
		name    string
		yml     string
		environ []string
		want    []string
	}{
		{
			name:    "unknown key",
			environ: []string{"PROXY_TOPOLOGY_SET_PROXY__CONFIG_FOLDER=/x"},
			want:    []string{"env PROXY_TOPOLOGY_SET_PROXY__CONFIG_FOLDER does not name a scalar config key"},
		},
		{
			name:    "single underscore between parts",
			environ: []string{"PROXY_TOPOLOGY_SET_PROXY_CONFIGFOLDER=/x"},
			want:    []string{"env PROXY_TOPOLOGY_SET_PROXY_CONFIGFOLDER does not name a scalar config key"},
		},
		{
			name:    "a section is not a scalar",
			environ: []string{"PROXY_TOPOLOGY_SET_PROXY=x"},
			want:    []string{"env PROXY_TOPOLOGY_SET_PROXY does not name a scalar config key"},
		},
		{
			name:    "a list is not a scalar",
			environ: []string{"PROXY_TOPOLOGY_SET_PROXY__NODETOPOLOGY__FROMREGEXP=x"},
			want:    []string{"env PROXY_TOPOLOGY_SET_PROXY__NODETOPOLOGY__FROMREGEXP does not name a scalar config key"},
		},
		{
			name:    "nothing after the prefix",
			environ: []string{"PROXY_TOPOLOGY_SET_=x"},
			want:    []string{"env PROXY_TOPOLOGY_SET_ does not name a scalar config key"},
		},
		{
			name:    "int that is not a number",
			environ: []string{"PROXY_TOPOLOGY_SET_PROXY__CACHETIMEOUTMINUTES=1h"},
			want:    []string{`env PROXY_TOPOLOGY_SET_PROXY__CACHETIMEOUTMINUTES: proxy.cacheTimeoutMinutes: "1h" is not an integer`},
		},
		{
			name:    "int that is a fraction",
			environ: []string{"PROXY_TOPOLOGY_SET_PROXY__CACHETIMEOUTMINUTES=0.5"},
			want:    []string{`env PROXY_TOPOLOGY_SET_PROXY__CACHETIMEOUTMINUTES: proxy.cacheTimeoutMinutes: "0.5" is not an integer`},
		},
		{
			name:    "bool that is not a bool",
			environ: []string{"PROXY_TOPOLOGY_SET_PROXY__CONTROLLERPUBLISH=yes please"},
			want:    []string{`env PROXY_TOPOLOGY_SET_PROXY__CONTROLLERPUBLISH: proxy.controllerPublish: "yes please" is not true or false`},
		},
		{
			name:    "valid override, invalid value",
			environ: []string{"PROXY_TOPOLOGY_SET_PROXY__CACHETIMEOUTMINUTES=-9"},
			want:    []string{"env PROXY_TOPOLOGY_SET_PROXY__CACHETIMEOUTMINUTES: proxy.cacheTimeoutMinutes: -9 is invalid (0: no cache, -1: forever, N>0: minutes)"},
		},
		{
			name:    "invalid connection name",
			environ: []string{"PROXY_TOPOLOGY_SET_PROXY__DEFAULTCONNECTION=../x"},
			want:    []string{`env PROXY_TOPOLOGY_SET_PROXY__DEFAULTCONNECTION: proxy.defaultConnection: connection name "../x" has invalid character '.' at byte 0 (allowed: letters, digits, and . _ - after the first)`},
		},
		{
			name:    "an override that empties a required key",
			environ: []string{"PROXY_TOPOLOGY_SET_PROXY__CONFIGFOLDER="},
			want:    []string{"env PROXY_TOPOLOGY_SET_PROXY__CONFIGFOLDER: proxy.configFolder: required for driver: proxy"},
		},
		{
			name:    "node topology keys the compiler checks",
			environ: []string{"PROXY_TOPOLOGY_SET_PROXY__NODETOPOLOGY__TYPE=galaxy"},
			want:    []string{`env PROXY_TOPOLOGY_SET_PROXY__NODETOPOLOGY__TYPE: proxy.nodeTopology.type: "galaxy" is not one of cluster, node, zone, custom`},
		},
		{
			name:    "the driver",
			environ: []string{"PROXY_TOPOLOGY_SET_DRIVER=csi"},
			want:    []string{"env PROXY_TOPOLOGY_SET_DRIVER: driver: csi is only valid in a connection file; the main config serves proxy or local-hostpath"},
		},
		{
			name:    "the file and the environment each blamed for their own",
			yml:     minimal + "  maxVolumesPerNode: -1\n",
			environ: []string{"PROXY_TOPOLOGY_SET_PROXY__CACHETIMEOUTMINUTES=-9", "PROXY_TOPOLOGY_SET_CSINAME=-bad-"},
			want: []string{
				"config " + testFile + ": proxy.maxVolumesPerNode: -1 is negative",
				`env PROXY_TOPOLOGY_SET_CSINAME: csiName: "-bad-" is not a valid CSI driver name (alphanumerics, '-' and '.', starting and ending with an alphanumeric)`,
				"env PROXY_TOPOLOGY_SET_PROXY__CACHETIMEOUTMINUTES: proxy.cacheTimeoutMinutes: -9 is invalid (0: no cache, -1: forever, N>0: minutes)",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			yml := tt.yml
			if yml == "" {
				yml = minimal
			}
			_, err := loadMain(yml, tt.environ...)
			if err == nil {
				t.Fatal("no error")
			}
			if diff := cmp.Diff(tt.want, strings.Split(err.Error(), "\n")); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadMainFile(t *testing.T) {
	t.Run("missing file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "nope.yaml")
		_, err := LoadMainFile(path)
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("error %v is not fs.ErrNotExist", err)
		}
		if !strings.HasPrefix(err.Error(), "config "+path+": ") {
			t.Errorf("error %q does not name the file", err)
		}
	})
	t.Run("errors name the path", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "proxy.yaml")
		if err := os.WriteFile(path, []byte("driver: proxy\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadMainFile(path)
		if want := "config " + path + ": proxy.configFolder: required for driver: proxy"; err == nil || err.Error() != want {
			t.Errorf("error = %v, want %s", err, want)
		}
	})
	t.Run("reads the environment", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "proxy.yaml")
		if err := os.WriteFile(path, []byte(minimal), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("PROXY_TOPOLOGY_SET_PROXY__DEFAULTCONNECTION", "from-env")
		l, err := LoadMainFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if l.File != path || l.Proxy.DefaultConnection != "from-env" {
			t.Errorf("File = %q, defaultConnection = %q; want %q, from-env", l.File, l.Proxy.DefaultConnection, path)
		}
	})
}

// examples/proxy.yaml documents every option and is the binary's built-in
// default, so it must load exactly as written, with nothing unknown.
func TestExampleProxyYAML(t *testing.T) {
	const path = "../../examples/proxy.yaml"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	l, err := LoadMain(path, data, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Warnings) != 0 {
		t.Errorf("Warnings = %q, want none", l.Warnings)
	}
	if l.Driver != DriverProxy || l.CSIName != DefaultCSIName || l.Proxy.ConfigFolder == "" || l.Proxy.CacheTimeoutMinutes != 60 {
		t.Errorf("driver %q, csiName %q, configFolder %q, cacheTimeoutMinutes %d: not the documented defaults",
			l.Driver, l.CSIName, l.Proxy.ConfigFolder, l.Proxy.CacheTimeoutMinutes)
	}
	if len(l.Proxy.NodeTopology.FromRegexp) == 0 || l.Topology == nil {
		t.Error("the example's fromRegexp rules did not compile")
	}
	// The commented local-hostpath section must be valid too, since the
	// file says to switch driver to use it.
	l, err = LoadMain(path, data, []string{"PROXY_TOPOLOGY_SET_DRIVER=local-hostpath"})
	if err != nil {
		t.Fatalf("example with driver local-hostpath: %v", err)
	}
	if !filepath.IsAbs(l.LocalHostpath.ShareBasePath) {
		t.Errorf("shareBasePath %q is not absolute", l.LocalHostpath.ShareBasePath)
	}
}

func TestValidateCSIName(t *testing.T) {
	valid := []string{
		"a", "Z", "0", "a1", "a-b", "a.b", "A.B-c9",
		DefaultCSIName,
		"hostpath.csi.k8s.io",
		strings.Repeat("a", 63),
		"a--b", "a..b",
	}
	for _, n := range valid {
		t.Run("valid "+n, func(t *testing.T) {
			if err := ValidateCSIName(n); err != nil {
				t.Error(err)
			}
		})
	}
	tests := []struct{ name, want string }{
		{"", `"" must be 1 to 63 characters`},
		{strings.Repeat("a", 64), `"` + strings.Repeat("a", 64) + `" must be 1 to 63 characters`},
		{"-a", `"-a" is not a valid CSI driver name (alphanumerics, '-' and '.', starting and ending with an alphanumeric)`},
		{"a-", `"a-" is not a valid CSI driver name (alphanumerics, '-' and '.', starting and ending with an alphanumeric)`},
		{".a", `".a" is not a valid CSI driver name (alphanumerics, '-' and '.', starting and ending with an alphanumeric)`},
		{"a.", `"a." is not a valid CSI driver name (alphanumerics, '-' and '.', starting and ending with an alphanumeric)`},
		{"-", `"-" is not a valid CSI driver name (alphanumerics, '-' and '.', starting and ending with an alphanumeric)`},
		{"a_b", `"a_b" is not a valid CSI driver name (alphanumerics, '-' and '.', starting and ending with an alphanumeric)`},
		{"a b", `"a b" is not a valid CSI driver name (alphanumerics, '-' and '.', starting and ending with an alphanumeric)`},
		{"a/b", `"a/b" is not a valid CSI driver name (alphanumerics, '-' and '.', starting and ending with an alphanumeric)`},
		{"ünï", `"ünï" is not a valid CSI driver name (alphanumerics, '-' and '.', starting and ending with an alphanumeric)`},
		{"a\x00", `"a\x00" is not a valid CSI driver name (alphanumerics, '-' and '.', starting and ending with an alphanumeric)`},
	}
	for _, tt := range tests {
		t.Run("invalid "+tt.name, func(t *testing.T) {
			err := ValidateCSIName(tt.name)
			if err == nil || err.Error() != tt.want {
				t.Errorf("ValidateCSIName(%q) = %v, want %s", tt.name, err, tt.want)
			}
		})
	}
}
