package nodetopology

import (
	"strings"
	"testing"
)

func TestValidateLabelValue(t *testing.T) {
	tests := []struct {
		name  string
		value string
		ok    bool
	}{
		{"empty", "", true},
		{"single char", "a", true},
		{"single digit", "7", true},
		{"mixed", "Zone_1.a-b", true},
		{"63 chars", strings.Repeat("a", 63), true},
		{"64 chars", strings.Repeat("a", 64), false},
		{"space", "a b", false},
		{"slash", "a/b", false},
		{"leading dash", "-a", false},
		{"trailing dot", "a.", false},
		{"trailing underscore", "a_", false},
		{"only dash", "-", false},
		{"non-ascii", "zöne", false},
		{"newline", "a\n", false},
		{"colon", "a:b", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validateLabelValue(tt.value)
			if (err == nil) != tt.ok {
				t.Errorf("validateLabelValue(%q) = %v, want ok=%v", tt.value, err, tt.ok)
			}
		})
	}
}

func TestValidateLabelKey(t *testing.T) {
	tests := []struct {
		name    string
		key     string
		wantErr string // substring; "" means valid
	}{
		{"short", "zone", ""},
		{"prefixed", "topology.kubernetes.io/zone", ""},
		{"default prefix", DefaultPrefix + "/zone", ""},
		{"uppercase name", "example.com/Zone_A", ""},
		{"63 char name", "example.com/" + strings.Repeat("n", 63), ""},
		{"253 char prefix", strings.Repeat("a", 253) + "/zone", ""},
		{"empty", "", "name part must be non-empty"},
		{"empty name", "example.com/", "name part must be non-empty"},
		{"empty prefix", "/zone", "prefix part must be non-empty"},
		{"two slashes", "a/b/c", "at most one '/'"},
		{"64 char name", "example.com/" + strings.Repeat("n", 64), "no more than 63"},
		{"254 char prefix", strings.Repeat("a", 254) + "/zone", "no more than 253"},
		{"uppercase prefix", "Example.com/zone", "lowercase DNS subdomain"},
		{"underscore prefix", "ex_ample.com/zone", "lowercase DNS subdomain"},
		{"space in name", "a b", "name part must consist"},
		{"leading dot name", ".zone", "name part must consist"},
		{"prefix trailing dot", "example./zone", "lowercase DNS subdomain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validateLabelKey(tt.key)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("validateLabelKey(%q) = %v, want nil", tt.key, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("validateLabelKey(%q) = %v, want error containing %q", tt.key, err, tt.wantErr)
			}
		})
	}
}

func TestValidateDNSSubdomain(t *testing.T) {
	tests := []struct {
		name string
		s    string
		ok   bool
	}{
		{"simple", "example", true},
		{"dotted", "org.democratic-csi.topology", true},
		{"digits", "0.1", true},
		{"empty", "", false},
		{"uppercase", "Example", false},
		{"double dot", "a..b", false},
		{"leading dash", "-a", false},
		{"label trailing dash", "a-.b", false},
		{"slash", "a/b", false},
		{"253", strings.Repeat("a", 253), true},
		{"254", strings.Repeat("a", 254), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validateDNSSubdomain(tt.s)
			if (err == nil) != tt.ok {
				t.Errorf("validateDNSSubdomain(%q) = %v, want ok=%v", tt.s, err, tt.ok)
			}
		})
	}
}
