package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/democratic-csi/proxy-topology/pkg/ids"
)

// FuzzLoadMain feeds arbitrary YAML and one env override to LoadMain: the
// main config is written by hand, and whatever it says must either load
// into a config that keeps the promises the rest of the program relies on,
// or fail with a message naming the file or the override variable, never
// panic.
func FuzzLoadMain(f *testing.F) {
	if data, err := os.ReadFile(filepath.Join("..", "..", "examples", "proxy.yaml")); err == nil {
		f.Add(data, "", "")
	}
	f.Add([]byte("driver: proxy\nproxy:\n  configFolder: /c\n"), "PROXY__DEFAULTCONNECTION", "nfs")
	f.Add([]byte("driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: /var/lib/x\n"), "", "")
	f.Add([]byte("proxy:\n  configFolder: /c\n  cacheTimeoutMinutes: 0.5\n"), "PROXY__CACHETIMEOUTMINUTES", "-2")
	f.Add([]byte("proxy:\n  configFolder: /c\n  nodeTopology:\n    type: zone\n    fromRegexp:\n    - {topologyKey: zone, source: env, envName: Z, regex: '(a+)+b', templat: x}\n"), "", "")
	f.Add([]byte("proxy: {configFolder: /c, configSecret: ns/name}\n"), "PROXY__CONFIGFOLDER", "")
	f.Add([]byte("a: &a [*a, *a]\nproxy: *a\n"), "", "")
	f.Add([]byte("driver: csi\n---\ndriver: proxy\n"), "DRIVER", "proxy")
	const name = "fuzz.yaml"
	f.Fuzz(func(t *testing.T, data []byte, envKey, envValue string) {
		var environ []string
		if envKey != "" {
			environ = []string{EnvPrefix + envKey + "=" + envValue}
		}
		l, err := LoadMain(name, data, environ)
		if err != nil {
			if l != nil {
				t.Fatalf("error %v with a config", err)
			}
			msg := err.Error()
			fromFile := strings.HasPrefix(msg, "config "+name+": ")
			fromEnv := environ != nil && strings.HasPrefix(msg, "env "+EnvPrefix)
			if !fromFile && !fromEnv {
				t.Fatalf("error %q names neither the file nor the override", err)
			}
			return
		}
		for _, w := range l.Warnings {
			if !strings.HasPrefix(w, "config "+name+": ") {
				t.Fatalf("warning %q does not name the file", w)
			}
		}
		if l.CSIName != "" && ValidateCSIName(l.CSIName) != nil {
			t.Fatalf("accepted csiName %q", l.CSIName)
		}
		switch l.Driver {
		case DriverProxy:
			p := l.Proxy
			if l.Topology == nil {
				t.Fatal("driver proxy without a compiled node topology")
			}
			if (p.ConfigFolder == "") == (p.ConfigSecret == "") {
				t.Fatalf("configFolder %q and configSecret %q: want exactly one", p.ConfigFolder, p.ConfigSecret)
			}
			if p.DefaultConnection != "" && ids.ValidateConnectionName(p.DefaultConnection) != nil {
				t.Fatalf("accepted defaultConnection %q", p.DefaultConnection)
			}
			if p.CacheTimeoutMinutes < -1 || p.MaxVolumesPerNode < 0 {
				t.Fatalf("accepted cacheTimeoutMinutes %d, maxVolumesPerNode %d", p.CacheTimeoutMinutes, p.MaxVolumesPerNode)
			}
		case DriverLocalHostpath:
			if !filepath.IsAbs(l.LocalHostpath.ShareBasePath) {
				t.Fatalf("accepted shareBasePath %q", l.LocalHostpath.ShareBasePath)
			}
		default:
			t.Fatalf("accepted driver %q", l.Driver)
		}
	})
}
