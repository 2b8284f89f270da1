package labels

import (
	"strings"
	"testing"
)

func TestKeyError(t *testing.T) {
	for key, want := range map[string]string{
		"zone":                          "",
		"topology.kubernetes.io/zone":   "",
		"org.democratic-csi.topology/x": "",
		"":                              "name part must be non-empty",
		"a b":                           "name part must consist of alphanumeric characters",
		"Upper.example/zone":            "prefix part a lowercase RFC 1123 subdomain",
		"/zone":                         "prefix part must be non-empty",
		"a/b/c":                         "a valid label key must consist of",
		strings.Repeat("k", 64):         "name part must be no more than 63 bytes",
	} {
		err := KeyError(key)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("KeyError(%q) = %v, want %q", key, err, want)
		}
	}
}

func TestValueError(t *testing.T) {
	for value, want := range map[string]string{
		"":                      "",
		"zone1":                 "",
		"Node_1.a":              "",
		"a-":                    "must start and end with an alphanumeric character",
		"eu/1":                  "must start and end with an alphanumeric character",
		strings.Repeat("v", 64): "must be no more than 63 bytes",
	} {
		err := ValueError(value)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("ValueError(%q) = %v, want %q", value, err, want)
		}
	}
}

func TestPrefixError(t *testing.T) {
	for prefix, ok := range map[string]bool{"org.democratic-csi.topology": true, "": false, "Bad_Prefix": false, "a/b": false, "-x": false} {
		if err := PrefixError(prefix); (err == nil) != ok {
			t.Errorf("PrefixError(%q) = %v, want ok=%v", prefix, err, ok)
		}
	}
}

func TestFullKey(t *testing.T) {
	for _, tc := range []struct{ prefix, key, want string }{
		{"p.example", "zone", "p.example/zone"},
		{"p.example", "topology.kubernetes.io/zone", "topology.kubernetes.io/zone"},
		{"", "zone", "zone"},
	} {
		if got := FullKey(tc.prefix, tc.key); got != tc.want {
			t.Errorf("FullKey(%q, %q) = %q, want %q", tc.prefix, tc.key, got, tc.want)
		}
	}
}

// FuzzFullKey checks the promise validation builds on: a short key made
// full with a prefix is a valid label key exactly when the prefix is a
// valid prefix and the short key a valid key on its own, so a connection
// file's short key can be checked alone and then once prefixed; a key that
// is already full, or has no prefix to get, is never changed.
func FuzzFullKey(f *testing.F) {
	for _, s := range [][2]string{
		{"org.democratic-csi.topology", "zone"}, {"Org", "zone"}, {"p", "a/b"}, {"p", ""},
		{"a..b", "zone"}, {strings.Repeat("p", 253), strings.Repeat("n", 63)}, {"p", "-x"}, {"", "zone"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, prefix, key string) {
		full := FullKey(prefix, key)
		if strings.Contains(key, "/") || prefix == "" {
			if full != key {
				t.Fatalf("FullKey(%q, %q) = %q, want the key unchanged", prefix, key, full)
			}
			return
		}
		want := PrefixError(prefix) == nil && KeyError(key) == nil
		if got := KeyError(full) == nil; got != want {
			t.Fatalf("FullKey(%q, %q) = %q valid=%t; prefix: %v; key: %v", prefix, key, full, got, PrefixError(prefix), KeyError(key))
		}
	})
}
