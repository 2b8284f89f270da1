package config

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/democratic-csi/proxy-topology/pkg/nodetopology"
)

// Env overrides of the main config (PROXY_TOPOLOGY_SET_…): what they set,
// and errors blamed on the variable, not the file.

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
		t.Run(tt.name, func(t *testing.T) { checkMain(t, tt.yml, tt.environ, tt.want) })
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
