package config

import (
	"errors"
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

// checkMain loads yml with environ and wants want, with no warnings.
func checkMain(t *testing.T, yml string, environ []string, want Main) {
	t.Helper()
	l, err := loadMain(yml, environ...)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, l.Main, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Main (-want +got):\n%s", diff)
	}
	if len(l.Warnings) != 0 {
		t.Errorf("Warnings = %q, want none", l.Warnings)
	}
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
		t.Run(tt.name, func(t *testing.T) { checkMain(t, tt.yml, nil, tt.want) })
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
			want: []string{`proxy.cacheTimeoutMinutes: line 3: want a whole number; got a string ("soon")`},
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
			want: []string{`proxy.nodeTopology.fromRegexp[0]: line 5: want a mapping with the keys topologyKey, source, envName, file, label, regex, template; got a string ("zone")`},
		},
		{
			name: "every type error at once, named by key",
			yml:  minimal + "  nodeLocal: maybe\n  maxVolumesPerNode: [3]\n  maxIdLength: \"100\"\n",
			want: []string{`proxy.nodeLocal: line 3: want true or false; got a string ("maybe")`, `proxy.maxVolumesPerNode: line 4: want a whole number; got a list`},
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
		{"scalar document", "proxy\n", `the file: line 1: want a mapping with the keys driver, csiName, proxy, local-hostpath; got a string ("proxy")`},
		{"list document", "- proxy\n", "the file: line 1: want a mapping with the keys driver, csiName, proxy, local-hostpath; got a list"},
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
