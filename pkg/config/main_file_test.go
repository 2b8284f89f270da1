package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The main config read from a file: a missing or unreadable file, the
// shipped example, and csiName.

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
