package config

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

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

// FuzzUnknownKeysAsDecoded checks the unknown-key walk, which reads the
// parsed document (aliases, merge keys), against what decoding the file
// into maps shows: for every document whose keys are all strings, both
// name the same unknown keys in the same order. Keys that are not strings
// (1:, ~:) are left out of the comparison: decoding turns them into Go
// values, while the walk names them as written.
func FuzzUnknownKeysAsDecoded(f *testing.F) {
	f.Add([]byte("driver: csi\ncommon: &c {endpoint: unix:///s, tiemout: 1s}\ncsi:\n  <<: *c\n  prameters: {}\nlocal-hostpath: *c\n"))
	f.Add([]byte("proxy:\n  perDriver:\n    topology:\n    - &e {requirements: {zone: z}, extras: {}}\n    - <<: [*e, {bogus: 1}]\n      extra: {}\n"))
	f.Add([]byte("csi: {<<: {a: 1}, endpoint: x, b: 2}\nproxy: {perDriver: {nodeId: {template: x, templat: y}}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, _, err := decodeDocument("f.yaml", data)
		if err != nil || !stringKeysOnly(doc) {
			return
		}
		var raw map[string]any
		if yaml.Unmarshal(data, &raw) != nil {
			return
		}
		want := mapUnknownKeys(schemaOf(reflect.TypeOf(Connection{})), "", raw)
		d := decodeNode(doc, &Connection{}, decodeRules{})
		if d.yamlErr != nil || len(d.shape) > 0 {
			return // the file is refused before its keys are looked at
		}
		var got []string
		for _, u := range d.unknown {
			got = append(got, u.path())
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("unknown keys from the document %q, from decoding %q\n%s", got, want, data)
		}
	})
}

// mapUnknownKeys is the unknown-key walk over decoded maps, the reference
// for FuzzUnknownKeysAsDecoded: the keys of v, a value of s, that s does
// not know. Maps' own keys are free-form.
func mapUnknownKeys(s *schema, path string, v any) []string {
	switch s.t.Kind() {
	case reflect.Slice:
		list, _ := v.([]any)
		var out []string
		for i, item := range list {
			out = append(out, mapUnknownKeys(s.elem, fmt.Sprintf("%s[%d]", path, i), item)...)
		}
		return out
	case reflect.Struct:
	default:
		return nil
	}
	m, ok := stringMap(v)
	if !ok {
		return nil
	}
	var out []string
	for k, sub := range m {
		subPath := k
		if path != "" {
			subPath = path + "." + k
		}
		fs := s.field(k)
		if fs == nil {
			out = append(out, subPath)
			continue
		}
		out = append(out, mapUnknownKeys(fs.s, subPath, sub)...)
	}
	return out
}

// stringMap returns a decoded YAML mapping with its keys as strings; yaml.v3
// decodes a nested mapping with a non-string key (1: x) as map[any]any.
func stringMap(v any) (map[string]any, bool) {
	switch m := v.(type) {
	case map[string]any:
		return m, true
	case map[any]any:
		out := make(map[string]any, len(m))
		for k, x := range m {
			out[fmt.Sprint(k)] = x
		}
		return out, true
	}
	return nil, false
}

// stringKeysOnly reports whether every mapping key in n is a plain string
// or a merge key.
func stringKeysOnly(n *yaml.Node) bool {
	if n == nil {
		return true
	}
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i]; k.Kind != yaml.ScalarNode || k.Tag != "!!str" && k.Tag != "!!merge" {
				return false
			}
		}
	}
	for _, c := range n.Content {
		if !stringKeysOnly(c) {
			return false
		}
	}
	return true
}
