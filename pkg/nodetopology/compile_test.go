package nodetopology

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// compileErrors splits a Compile error into one string per problem.
func compileErrors(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	var out []string
	for _, e := range errs {
		var fe *FieldError
		if !errors.As(e, &fe) {
			t.Errorf("error %q is not a *FieldError", e)
		}
		out = append(out, e.Error())
	}
	return out
}

func TestCompileErrors(t *testing.T) {
	nodeName := func(key string) Rule { return Rule{TopologyKey: key, Source: SourceNodeName} }
	tests := []struct {
		name string
		cfg  Config
		want []string
	}{
		{
			name: "unknown type",
			cfg:  Config{Type: "foo"},
			want: []string{`proxy.nodeTopology.type: "foo" is not one of cluster, node, zone, custom`},
		},
		{
			name: "type is case sensitive",
			cfg:  Config{Type: "Cluster"},
			want: []string{`proxy.nodeTopology.type: "Cluster" is not one of cluster, node, zone, custom`},
		},
		{
			name: "invalid prefix",
			cfg:  Config{Prefix: "Bad_Prefix"},
			want: []string{`proxy.nodeTopology.prefix: "Bad_Prefix" is not a valid label key prefix: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`},
		},
		{
			name: "prefix with slash",
			cfg:  Config{Prefix: "a/b"},
			want: []string{`proxy.nodeTopology.prefix: "a/b" is not a valid label key prefix: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`},
		},
		{
			name: "invalid prefix is not repeated for short keys",
			cfg:  Config{Prefix: "-x", FromRegexp: []Rule{nodeName("zone"), nodeName("a/b/c")}},
			want: []string{
				`proxy.nodeTopology.prefix: "-x" is not a valid label key prefix: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`,
				`proxy.nodeTopology.fromRegexp[1].topologyKey: "a/b/c" is not a valid label key (a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName'))`,
			},
		},
		{
			name: "zone without rules",
			cfg:  Config{Type: TypeZone},
			want: []string{`proxy.nodeTopology.fromRegexp: type zone has no base segment, so at least one rule is required`},
		},
		{
			name: "custom without rules",
			cfg:  Config{Type: TypeCustom},
			want: []string{`proxy.nodeTopology.fromRegexp: type custom has no base segment, so at least one rule is required`},
		},
		{
			name: "missing topologyKey",
			cfg:  Config{FromRegexp: []Rule{{Source: SourceNodeName}}},
			want: []string{`proxy.nodeTopology.fromRegexp[0].topologyKey: required`},
		},
		{
			name: "invalid short topologyKey",
			cfg:  Config{FromRegexp: []Rule{nodeName("zone"), nodeName("a b")}},
			want: []string{`proxy.nodeTopology.fromRegexp[1].topologyKey: "a b" is not a valid label key once prefixed as "org.democratic-csi.topology/a b" (name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]'))`},
		},
		{
			name: "invalid verbatim topologyKey",
			cfg:  Config{FromRegexp: []Rule{nodeName("Topology.example/zone")}},
			want: []string{`proxy.nodeTopology.fromRegexp[0].topologyKey: "Topology.example/zone" is not a valid label key (prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*'))`},
		},
		{
			name: "topologyKey too long after prefixing",
			cfg:  Config{FromRegexp: []Rule{nodeName(strings.Repeat("k", 64))}},
			want: []string{`proxy.nodeTopology.fromRegexp[0].topologyKey: "` + strings.Repeat("k", 64) + `" is not a valid label key once prefixed as "org.democratic-csi.topology/` + strings.Repeat("k", 64) + `" (name part must be no more than 63 bytes)`},
		},
		{
			name: "missing source",
			cfg:  Config{FromRegexp: []Rule{{TopologyKey: "zone"}}},
			want: []string{`proxy.nodeTopology.fromRegexp[0].source: required (one of nodeName, hostname, env, file, nodeLabel)`},
		},
		{
			name: "unknown source",
			cfg:  Config{FromRegexp: []Rule{{TopologyKey: "zone", Source: "nodename"}}},
			want: []string{`proxy.nodeTopology.fromRegexp[0].source: "nodename" is not one of nodeName, hostname, env, file, nodeLabel`},
		},
		{
			name: "env without envName",
			cfg:  Config{FromRegexp: []Rule{{TopologyKey: "zone", Source: SourceEnv}}},
			want: []string{`proxy.nodeTopology.fromRegexp[0].envName: required for source env`},
		},
		{
			name: "invalid envName",
			cfg:  Config{FromRegexp: []Rule{{TopologyKey: "zone", Source: SourceEnv, EnvName: "A=B"}}},
			want: []string{`proxy.nodeTopology.fromRegexp[0].envName: "A=B" is not a valid environment variable name`},
		},
		{
			name: "file without file",
			cfg:  Config{FromRegexp: []Rule{{TopologyKey: "zone", Source: SourceFile}}},
			want: []string{`proxy.nodeTopology.fromRegexp[0].file: required for source file`},
		},
		{
			name: "relative file",
			cfg:  Config{FromRegexp: []Rule{{TopologyKey: "zone", Source: SourceFile, File: "etc/zone"}}},
			want: []string{`proxy.nodeTopology.fromRegexp[0].file: "etc/zone" is not an absolute path`},
		},
		{
			name: "nodeLabel without label",
			cfg:  Config{FromRegexp: []Rule{{TopologyKey: "zone", Source: SourceNodeLabel}}},
			want: []string{`proxy.nodeTopology.fromRegexp[0].label: required for source nodeLabel`},
		},
		{
			name: "invalid label",
			cfg:  Config{FromRegexp: []Rule{{TopologyKey: "zone", Source: SourceNodeLabel, Label: "a b"}}},
			want: []string{`proxy.nodeTopology.fromRegexp[0].label: "a b" is not a valid label key (name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]'))`},
		},
		{
			name: "field of another source",
			cfg:  Config{FromRegexp: []Rule{{TopologyKey: "zone", Source: SourceEnv, EnvName: "ZONE", File: "/etc/zone", Label: "x"}}},
			want: []string{
				`proxy.nodeTopology.fromRegexp[0].file: only used by source file, but source is env`,
				`proxy.nodeTopology.fromRegexp[0].label: only used by source nodeLabel, but source is env`,
			},
		},
		{
			name: "bad regex",
			cfg:  Config{FromRegexp: []Rule{nodeName("a"), nodeName("b"), {TopologyKey: "c", Source: SourceNodeName, Regex: "(a"}}},
			want: []string{"proxy.nodeTopology.fromRegexp[2].regex: error parsing regexp: missing closing ) in `(a`"},
		},
		{
			name: "regex escaping the anchor group",
			cfg:  Config{FromRegexp: []Rule{{TopologyKey: "c", Source: SourceNodeName, Regex: "a)|(b"}}},
			want: []string{"proxy.nodeTopology.fromRegexp[0].regex: error parsing regexp: unexpected ) in `a)|(b`"},
		},
		{
			name: "regex whose comment swallows the anchor",
			cfg:  Config{FromRegexp: []Rule{{TopologyKey: "c", Source: SourceNodeName, Regex: "(?x)a#"}}},
			want: []string{"proxy.nodeTopology.fromRegexp[0].regex: cannot be anchored as ^(?:regex)$: error parsing regexp: missing closing ) in `^(?:(?x)a#)$`"},
		},
		{
			name: "template group out of range",
			cfg:  Config{FromRegexp: []Rule{nodeName("a"), {TopologyKey: "b", Source: SourceNodeName, Regex: "(a)(b)", Template: "{match:3}"}}},
			want: []string{`proxy.nodeTopology.fromRegexp[1].template: {match:3} but the regex has 2 groups`},
		},
		{
			name: "template dollar group out of range, one group",
			cfg:  Config{FromRegexp: []Rule{{TopologyKey: "b", Source: SourceNodeName, Regex: "(a)", Template: "x-${match:2}"}}},
			want: []string{`proxy.nodeTopology.fromRegexp[0].template: ${match:2} but the regex has 1 group`},
		},
		{
			name: "template group on the default regex",
			cfg:  Config{FromRegexp: []Rule{{TopologyKey: "b", Source: SourceNodeName, Template: "{match:2}"}}},
			want: []string{`proxy.nodeTopology.fromRegexp[0].template: {match:2} but the regex has 1 group`},
		},
		{
			name: "template unknown name",
			cfg:  Config{FromRegexp: []Rule{{TopologyKey: "b", Source: SourceNodeName, Regex: "(?<zone>.*)", Template: "{match:region}"}}},
			want: []string{`proxy.nodeTopology.fromRegexp[0].template: {match:region} but the regex has no group named "region"`},
		},
		{
			name: "template empty reference",
			cfg:  Config{FromRegexp: []Rule{{TopologyKey: "b", Source: SourceNodeName, Template: "{match:}"}}},
			want: []string{`proxy.nodeTopology.fromRegexp[0].template: {match:} but it names no group`},
		},
		{
			name: "template unterminated",
			cfg:  Config{FromRegexp: []Rule{{TopologyKey: "b", Source: SourceNodeName, Template: "z-{match:1"}}},
			want: []string{`proxy.nodeTopology.fromRegexp[0].template: unterminated "{match:" (placeholders are {match:N}, ${match:N} or {match:name})`},
		},
		{
			name: "template huge group number",
			cfg:  Config{FromRegexp: []Rule{{TopologyKey: "b", Source: SourceNodeName, Template: "{match:99999999999999999999999}"}}},
			want: []string{`proxy.nodeTopology.fromRegexp[0].template: {match:99999999999999999999999} but the regex has 1 group`},
		},
		{
			name: "every problem is reported",
			cfg: Config{Type: "x", Prefix: "UPPER", FromRegexp: []Rule{
				{Source: SourceEnv},
				{TopologyKey: "z", Source: SourceFile, File: "rel", Regex: "["},
			}},
			want: []string{
				`proxy.nodeTopology.type: "x" is not one of cluster, node, zone, custom`,
				`proxy.nodeTopology.prefix: "UPPER" is not a valid label key prefix: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`,
				`proxy.nodeTopology.fromRegexp[0].topologyKey: required`,
				`proxy.nodeTopology.fromRegexp[0].envName: required for source env`,
				`proxy.nodeTopology.fromRegexp[1].file: "rel" is not an absolute path`,
				"proxy.nodeTopology.fromRegexp[1].regex: error parsing regexp: unterminated [] set in `[`",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := Compile(tt.cfg)
			if err == nil {
				t.Fatalf("Compile succeeded (%+v), want errors", e)
			}
			if e != nil {
				t.Errorf("Compile returned an Evaluator along with an error")
			}
			if diff := cmp.Diff(tt.want, compileErrors(t, err)); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCompileAccepts(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"zero config", Config{}},
		{"node", Config{Type: TypeNode}},
		{"custom prefix", Config{Prefix: "example.com"}},
		{"every source", Config{Type: TypeZone, FromRegexp: []Rule{
			{TopologyKey: "a", Source: SourceNodeName},
			{TopologyKey: "b", Source: SourceHostname},
			{TopologyKey: "c", Source: SourceEnv, EnvName: "ZONE"},
			{TopologyKey: "d", Source: SourceFile, File: "/etc/zone"},
			{TopologyKey: "e", Source: SourceNodeLabel, Label: "topology.kubernetes.io/zone"},
		}}},
		{"every template form", Config{FromRegexp: []Rule{{
			TopologyKey: "zone", Source: SourceNodeName,
			Regex:    `(?<region>[a-z]+)-(\d+)`,
			Template: "r{match:1}-${match:2}.{match:region}${match:region}{match:0}",
		}}}},
		{"literal braces", Config{FromRegexp: []Rule{{TopologyKey: "zone", Source: SourceNodeName, Template: "{x}{match}$"}}}},
		{"verbatim key", Config{FromRegexp: []Rule{{TopologyKey: "topology.kubernetes.io/zone", Source: SourceNodeName}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Compile(tt.cfg); err != nil {
				t.Fatalf("Compile: %v", err)
			}
		})
	}
}

func TestEvaluatorAccessors(t *testing.T) {
	rules := []Rule{
		{TopologyKey: "zone", Source: SourceEnv, EnvName: "ZONE"},
		{TopologyKey: "zone", Source: SourceFile, File: "/etc/zone", Regex: "z-(.*)", Template: "{match:1}"},
		{TopologyKey: "region", Source: SourceEnv, EnvName: "REGION"},
		{TopologyKey: "region", Source: SourceEnv, EnvName: "ZONE"},
		{TopologyKey: "rack", Source: SourceFile, File: "/etc/rack"},
		{TopologyKey: "rack", Source: SourceFile, File: "/etc/zone"},
	}
	e, err := Compile(Config{Type: TypeCustom, FromRegexp: rules})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.Type(); got != TypeZone {
		t.Errorf("Type() = %q, want zone", got)
	}
	if got := e.Prefix(); got != DefaultPrefix {
		t.Errorf("Prefix() = %q, want %q", got, DefaultPrefix)
	}
	if e.NeedsLabels() {
		t.Errorf("NeedsLabels() = true without nodeLabel rules")
	}
	if diff := cmp.Diff([]string{"ZONE", "REGION"}, e.EnvNames()); diff != "" {
		t.Errorf("EnvNames (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"/etc/zone", "/etc/rack"}, e.FilePaths()); diff != "" {
		t.Errorf("FilePaths (-want +got):\n%s", diff)
	}
	want := []Rule{
		{TopologyKey: "zone", Source: SourceEnv, EnvName: "ZONE", Regex: "(.*)", Template: "{match:0}"},
		{TopologyKey: "zone", Source: SourceFile, File: "/etc/zone", Regex: "z-(.*)", Template: "{match:1}"},
		{TopologyKey: "region", Source: SourceEnv, EnvName: "REGION", Regex: "(.*)", Template: "{match:0}"},
		{TopologyKey: "region", Source: SourceEnv, EnvName: "ZONE", Regex: "(.*)", Template: "{match:0}"},
		{TopologyKey: "rack", Source: SourceFile, File: "/etc/rack", Regex: "(.*)", Template: "{match:0}"},
		{TopologyKey: "rack", Source: SourceFile, File: "/etc/zone", Regex: "(.*)", Template: "{match:0}"},
	}
	got := e.Rules()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Rules (-want +got):\n%s", diff)
	}
	got[0].Source = "mutated"
	if e.Rules()[0].Source != SourceEnv {
		t.Errorf("Rules() exposes internal state")
	}
	if rules[0].Regex != "" {
		t.Errorf("Compile mutated the caller's rules")
	}

	types := []struct{ in, want string }{
		{"", TypeCluster}, {TypeCluster, TypeCluster}, {TypeNode, TypeNode},
		{TypeZone, TypeZone}, {TypeCustom, TypeZone},
	}
	for _, tt := range types {
		e, err := Compile(Config{Type: tt.in, FromRegexp: rules[:1]})
		if err != nil {
			t.Fatal(err)
		}
		if e.Type() != tt.want {
			t.Errorf("Type() for %q = %q, want %q", tt.in, e.Type(), tt.want)
		}
	}

	e, err = Compile(Config{Prefix: "example.com", FromRegexp: []Rule{{TopologyKey: "z", Source: SourceNodeLabel, Label: "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !e.NeedsLabels() || e.Prefix() != "example.com" || e.EnvNames() != nil || e.FilePaths() != nil {
		t.Errorf("NeedsLabels=%v Prefix=%q EnvNames=%v FilePaths=%v", e.NeedsLabels(), e.Prefix(), e.EnvNames(), e.FilePaths())
	}
}
