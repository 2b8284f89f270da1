package accessible

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	const nameRule = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
	const valueRule = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
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
			want:    `proxy.perDriver.topology[0].requirements["a/b/zone"]: not a valid label key (a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName'))`,
		},
		{
			name:    "empty extra key",
			entries: []Entry{{Extra: kvs("", "v")}},
			opts:    zoneOpts,
			want:    `proxy.perDriver.topology[0].extra[""]: not a valid label key (name part must be non-empty; name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]'))`,
		},
		{
			name:    "bad prefix in options",
			entries: []Entry{zoneEntry("z1")},
			opts:    Options{Prefix: "Org.Example", Type: "zone"},
			want:    `proxy.perDriver.topology[0].requirements["zone"]: with the prefix, "Org.Example/zone" is not a valid label key (prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*'))`,
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
				`proxy.perDriver.topology[0].extra["UPPER/x"]: not a valid label key (prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*'))`,
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
	const nameRule = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
	const prefixRule = "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
	for _, tc := range []struct{ key, want string }{
		{"zone", ""},
		{"z", ""},
		{"Zone_1.a-b", ""},
		{"org.democratic-csi.topology/zone", ""},
		{"topology.kubernetes.io/zone", ""},
		{"a/b", ""},
		{"1-2.io/9", ""},
		{strings.Repeat("n", 63), ""},
		{strings.Repeat("n", 64), "name part must be no more than 63 bytes"},
		{strings.Repeat("p", 253) + "/zone", ""},
		{strings.Repeat("p", 254) + "/zone", "prefix part must be no more than 253 bytes"},
		{"", "name part must be non-empty"},
		{"/zone", "prefix part must be non-empty"},
		{"org.io/", "name part must be non-empty"},
		{"a/b/c", "a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"},
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
			// Kubernetes may say more than one thing; the first is asserted.
			if got := labelKeyProblem(tc.key); !strings.HasPrefix(got, tc.want) || (tc.want == "") != (got == "") {
				t.Errorf("labelKeyProblem(%q) = %q, want %q", tc.key, got, tc.want)
			}
		})
	}
}

func TestLabelValueProblem(t *testing.T) {
	const rule = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
	for _, tc := range []struct{ value, want string }{
		{"z1", ""},
		{"a", ""},
		{"eu-west_1.A", ""},
		{strings.Repeat("v", 63), ""},
		{strings.Repeat("v", 64), "must be no more than 63 bytes"},
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
