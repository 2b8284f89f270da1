package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/nodetopology"
)

// FuzzParseConnection feeds arbitrary bytes to ParseConnection: connection
// files are edited by hand at run time, and no content may crash the
// proxy. Beyond not panicking, a result must be consistent: a connection
// that parses also validates, and every message names the file.
func FuzzParseConnection(f *testing.F) {
	examples, _ := filepath.Glob("../../examples/connections/*.yaml")
	for _, e := range examples {
		if data, err := os.ReadFile(e); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("driver: csi\ncsi: {endpoint: 'unix:///s', timeout: 1s, parameters: {connection: x}}\n"))
	f.Add([]byte("proxy: {perDriver: {topology: [{requirements: {a/b/c: x}}, {extra: {'': ''}}], nodeId: {template: '{x}'}}}\n"))
	f.Add([]byte("a: &a [*a, *a]\nb: *a\n"))
	f.Add([]byte("driver: csi\n---\n---\n"))

	const file = "fuzz.yaml"
	opts := []accessible.Options{
		{Prefix: nodetopology.DefaultPrefix, Type: nodetopology.TypeCluster},
		{Prefix: "", Type: nodetopology.TypeNode},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, o := range opts {
			c, warnings, err := ParseConnection(file, data, o)
			if err != nil {
				if c != nil {
					t.Fatalf("error %v with a connection", err)
				}
				if !strings.HasPrefix(err.Error(), "file "+file+": ") {
					t.Fatalf("error %q does not name the file", err)
				}
			} else if verr := c.Validate(o); verr != nil {
				t.Fatalf("parsed connection does not validate: %v", verr)
			} else if c.Driver != DriverCSI && c.Driver != DriverLocalHostpath {
				t.Fatalf("accepted driver %q", c.Driver)
			}
			for _, w := range warnings {
				if !strings.HasPrefix(w, "file "+file+": unknown key ") {
					t.Fatalf("warning %q", w)
				}
			}
		}
	})
}
