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
