package accessible

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	const nameRule = "name must consist of alphanumerics, '-', '_' or '.', and begin and end with an alphanumeric"
	const valueRule = "must consist of alphanumerics, '-', '_' or '.', and begin and end with an alphanumeric"
	for _, tc := range []struct {
		name    string
		entries []Entry
		opts    Options
		want    string // "" = valid
	}{
		{name: "nil list", entries: nil, opts: zoneOpts},
		{
			name: "valid short, verbatim and extra keys",
			entries: []Entry{
				{Requirements: kvs("zone", "z1", "topology.kubernetes.io/region", "eu-west_1.a"), Extra: kvs("custom.prefix/custom.name", "custom.value")},
				{Extra: kvs("storage", "fast")},
			},
			opts: zoneOpts,
		},
		{
			name:    "same label twice with the same value",
			entries: []Entry{{Requirements: kvs("zone", "z1", pk("zone"), "z1"), Extra: kvs(pk("zone"), "z1")}},
			opts:    zoneOpts,
		},
		{
			name:    "empty prefix keeps short keys",
			entries: []Entry{zoneEntry("z1")},
			opts:    Options{Type: "zone"},
		},
		{
			name:    "both empty",
			entries: []Entry{zoneEntry("z1"), zoneEntry("z2"), {Requirements: map[string]string{}}},
			opts:    zoneOpts,
			want:    `proxy.perDriver.topology[2]: requirements and extra are both empty`,
		},
		{
			name:    "bad requirement key",
			entries: []Entry{zoneEntry("z1"), {Requirements: kvs("bad key!", "v")}},
			opts:    zoneOpts,
			want:    `proxy.perDriver.topology[1].requirements["bad key!"]: not a valid label key (` + nameRule + `)`,
		},
		{
			name:    "bad extra value",
			entries: []Entry{{Requirements: kvs("zone", "z1"), Extra: kvs("a/b", "x y")}},
			opts:    zoneOpts,
			want:    `proxy.perDriver.topology[0].extra["a/b"]: value "x y" is not a valid label value (` + valueRule + `)`,
		},
		{
			name:    "empty requirement value",
			entries: []Entry{{Requirements: kvs("zone", "")}},
			opts:    zoneOpts,
			want:    `proxy.perDriver.topology[0].requirements["zone"]: value "" is not a valid label value (must not be empty, as CSI topology segments are non-empty)`,
		},
		{
			name:    "two slashes",
			entries: []Entry{{Requirements: kvs("a/b/zone", "z1")}},
			opts:    zoneOpts,
			want:    `proxy.perDriver.topology[0].requirements["a/b/zone"]: not a valid label key (must contain at most one '/')`,
		},
		{
			name:    "empty extra key",
			entries: []Entry{{Extra: kvs("", "v")}},
			opts:    zoneOpts,
			want:    `proxy.perDriver.topology[0].extra[""]: not a valid label key (must not be empty)`,
		},
		{
			name:    "bad prefix in options",
			entries: []Entry{zoneEntry("z1")},
			opts:    Options{Prefix: "Org.Example", Type: "zone"},
			want:    `proxy.perDriver.topology[0].requirements["zone"]: with the prefix, "Org.Example/zone" is not a valid label key (prefix must be a DNS subdomain: lowercase alphanumerics and '-' in parts separated by '.', each beginning and ending with an alphanumeric)`,
		},
		{
			name:    "requirement and extra disagree",
			entries: []Entry{{Requirements: kvs("zone", "z1"), Extra: kvs(pk("zone"), "z2")}},
			opts:    zoneOpts,
			want:    `proxy.perDriver.topology[0].extra["org.democratic-csi.topology/zone"]: value "z2" conflicts with requirements["zone"] value "z1" (both are label "org.democratic-csi.topology/zone")`,
		},
		{
			name:    "short and verbatim requirement disagree",
			entries: []Entry{{Requirements: kvs("zone", "z1", pk("zone"), "z2")}},
			opts:    zoneOpts,
			want:    `proxy.perDriver.topology[0].requirements["zone"]: value "z1" conflicts with requirements["org.democratic-csi.topology/zone"] value "z2" (both are label "org.democratic-csi.topology/zone")`,
		},
		{
			name: "every problem is reported, in order",
			entries: []Entry{
				{Requirements: kvs("zone", "z 1", "-rack", "r1"), Extra: kvs("UPPER/x", "v")},
				{},
			},
			opts: zoneOpts,
			want: strings.Join([]string{
				`proxy.perDriver.topology[0].requirements["-rack"]: not a valid label key (` + nameRule + `)`,
				`proxy.perDriver.topology[0].requirements["zone"]: value "z 1" is not a valid label value (` + valueRule + `)`,
				`proxy.perDriver.topology[0].extra["UPPER/x"]: not a valid label key (prefix must be a DNS subdomain: lowercase alphanumerics and '-' in parts separated by '.', each beginning and ending with an alphanumeric)`,
				`proxy.perDriver.topology[1]: requirements and extra are both empty`,
			}, "\n"),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.entries, tc.opts)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("Validate:\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestLabelKeyProblem(t *testing.T) {
	const nameRule = "name must consist of alphanumerics, '-', '_' or '.', and begin and end with an alphanumeric"
	const prefixRule = "prefix must be a DNS subdomain: lowercase alphanumerics and '-' in parts separated by '.', each beginning and ending with an alphanumeric"
	for _, tc := range []struct{ key, want string }{
		{"zone", ""},
		{"z", ""},
		{"Zone_1.a-b", ""},
		{"org.democratic-csi.topology/zone", ""},
		{"topology.kubernetes.io/zone", ""},
		{"a/b", ""},
		{"1-2.io/9", ""},
		{strings.Repeat("n", 63), ""},
		{strings.Repeat("n", 64), "name must be at most 63 characters"},
		{strings.Repeat("p", 253) + "/zone", ""},
		{strings.Repeat("p", 254) + "/zone", "prefix must be at most 253 characters"},
		{"", "must not be empty"},
		{"/zone", "prefix before '/' must not be empty"},
		{"org.io/", "name after '/' must not be empty"},
		{"a/b/c", "must contain at most one '/'"},
		{"bad key!", nameRule},
		{"-zone", nameRule},
		{"zone-", nameRule},
		{"_zone", nameRule},
		{"zöne", nameRule},
		{"Org.io/zone", prefixRule},
		{"org_x.io/zone", prefixRule},
		{"org..io/zone", prefixRule},
		{".org.io/zone", prefixRule},
		{"org.io./zone", prefixRule},
		{"org.-io/zone", prefixRule},
		{"org-.io/zone", prefixRule},
		{"org.io/-zone", nameRule},
	} {
		t.Run(tc.key, func(t *testing.T) {
			if got := labelKeyProblem(tc.key); got != tc.want {
				t.Errorf("labelKeyProblem(%q) = %q, want %q", tc.key, got, tc.want)
			}
		})
	}
}

func TestLabelValueProblem(t *testing.T) {
	const rule = "must consist of alphanumerics, '-', '_' or '.', and begin and end with an alphanumeric"
	for _, tc := range []struct{ value, want string }{
		{"z1", ""},
		{"a", ""},
		{"eu-west_1.A", ""},
		{strings.Repeat("v", 63), ""},
		{strings.Repeat("v", 64), "must be at most 63 characters"},
		{"", "must not be empty, as CSI topology segments are non-empty"},
		{"x y", rule},
		{"-z1", rule},
		{"z1.", rule},
		{"a/b", rule},
		{"ü", rule},
	} {
		t.Run(tc.value, func(t *testing.T) {
			if got := labelValueProblem(tc.value); got != tc.want {
				t.Errorf("labelValueProblem(%q) = %q, want %q", tc.value, got, tc.want)
			}
		})
	}
}
