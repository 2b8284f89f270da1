package nodetopology

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const (
	pZone   = DefaultPrefix + "/zone"
	pRegion = DefaultPrefix + "/region"
)

func mustCompile(t *testing.T, cfg Config) *Evaluator {
	t.Helper()
	e, err := Compile(cfg)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return e
}

// zoneRules is a type zone config, so results hold no base segment.
func zoneRules(rules ...Rule) Config {
	return Config{Type: TypeZone, FromRegexp: rules}
}

func TestEvaluateSources(t *testing.T) {
	envRule := Rule{TopologyKey: "zone", Source: SourceEnv, EnvName: "ZONE"}
	fileRule := Rule{TopologyKey: "zone", Source: SourceFile, File: "/etc/zone"}
	labelRule := Rule{TopologyKey: "zone", Source: SourceNodeLabel, Label: "topology.kubernetes.io/zone"}
	notExist := &fs.PathError{Op: "stat", Path: "/etc/zone", Err: fs.ErrNotExist}
	denied := &fs.PathError{Op: "open", Path: "/etc/zone", Err: fs.ErrPermission}

	tests := []struct {
		name string
		rule Rule
		in   Inputs
		want RuleResult
	}{
		{
			name: "nodeName",
			rule: Rule{TopologyKey: "zone", Source: SourceNodeName},
			in:   Inputs{NodeName: "node-7"},
			want: RuleResult{Source: "nodeName", Input: "node-7", Value: "node-7", Status: StatusMatched},
		},
		{
			name: "nodeName unknown",
			rule: Rule{TopologyKey: "zone", Source: SourceNodeName},
			in:   Inputs{Hostname: "h"},
			want: RuleResult{Source: "nodeName", Status: StatusSkipped, Reason: "node name is not known"},
		},
		{
			name: "hostname",
			rule: Rule{TopologyKey: "zone", Source: SourceHostname},
			in:   Inputs{NodeName: "n", Hostname: "host-1"},
			want: RuleResult{Source: "hostname", Input: "host-1", Value: "host-1", Status: StatusMatched},
		},
		{
			name: "hostname unknown",
			rule: Rule{TopologyKey: "zone", Source: SourceHostname},
			in:   Inputs{NodeName: "n"},
			want: RuleResult{Source: "hostname", Status: StatusSkipped, Reason: "hostname is not known"},
		},
		{
			name: "env",
			rule: envRule,
			in:   Inputs{Env: map[string]string{"ZONE": "z1"}},
			want: RuleResult{Source: "env ZONE", Input: "z1", Value: "z1", Status: StatusMatched},
		},
		{
			name: "env not set",
			rule: envRule,
			in:   Inputs{Env: map[string]string{"OTHER": "z1"}},
			want: RuleResult{Source: "env ZONE", Status: StatusSkipped, Reason: "env ZONE is not set"},
		},
		{
			name: "env nil map",
			rule: envRule,
			want: RuleResult{Source: "env ZONE", Status: StatusSkipped, Reason: "env ZONE is not set"},
		},
		{
			name: "env set but empty",
			rule: envRule,
			in:   Inputs{Env: map[string]string{"ZONE": ""}},
			want: RuleResult{Source: "env ZONE", Status: StatusSkipped, Reason: "rendered value is empty"},
		},
		{
			name: "env value is not trimmed",
			rule: envRule,
			in:   Inputs{Env: map[string]string{"ZONE": "z1\n"}},
			want: RuleResult{Source: "env ZONE", Input: "z1\n", Status: StatusSkipped, Reason: `regex did not match "z1\n"`},
		},
		{
			name: "file",
			rule: fileRule,
			in:   Inputs{Files: map[string]FileInput{"/etc/zone": {Content: "z1\n"}}},
			want: RuleResult{Source: "file /etc/zone", Input: "z1", Value: "z1", Status: StatusMatched},
		},
		{
			name: "file not read",
			rule: fileRule,
			in:   Inputs{Files: map[string]FileInput{"/etc/other": {Content: "z1"}}},
			want: RuleResult{Source: "file /etc/zone", Status: StatusSkipped, Reason: "file /etc/zone was not read"},
		},
		{
			name: "file does not exist",
			rule: fileRule,
			in:   Inputs{Files: map[string]FileInput{"/etc/zone": {Err: notExist}}},
			want: RuleResult{Source: "file /etc/zone", Status: StatusSkipped, Reason: "file /etc/zone does not exist"},
		},
		{
			name: "file unreadable",
			rule: fileRule,
			in:   Inputs{Files: map[string]FileInput{"/etc/zone": {Err: denied}}},
			want: RuleResult{Source: "file /etc/zone", Status: StatusError, Reason: "cannot read file /etc/zone: open /etc/zone: permission denied"},
		},
		{
			name: "file too large",
			rule: fileRule,
			in:   Inputs{Files: map[string]FileInput{"/etc/zone": {Err: ErrFileTooLarge}}},
			want: RuleResult{Source: "file /etc/zone", Status: StatusError, Reason: "cannot read file /etc/zone: file is larger than the 64 KiB limit"},
		},
		{
			name: "nodeLabel",
			rule: labelRule,
			in:   Inputs{Labels: map[string]string{"topology.kubernetes.io/zone": "eu-1a"}},
			want: RuleResult{Source: "nodeLabel topology.kubernetes.io/zone", Input: "eu-1a", Value: "eu-1a", Status: StatusMatched},
		},
		{
			name: "nodeLabel without label source",
			rule: labelRule,
			want: RuleResult{Source: "nodeLabel topology.kubernetes.io/zone", Status: StatusSkipped, Reason: "no label source configured"},
		},
		{
			name: "nodeLabel not on node",
			rule: labelRule,
			in:   Inputs{Labels: map[string]string{}},
			want: RuleResult{Source: "nodeLabel topology.kubernetes.io/zone", Status: StatusSkipped, Reason: "label topology.kubernetes.io/zone not on node"},
		},
		{
			name: "nodeLabel source failed",
			rule: labelRule,
			in:   Inputs{Labels: map[string]string{"topology.kubernetes.io/zone": "eu-1a"}, LabelsErr: errors.New("nodes \"n\" is forbidden")},
			want: RuleResult{Source: "nodeLabel topology.kubernetes.io/zone", Status: StatusError, Reason: `cannot read node labels: nodes "n" is forbidden`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustCompile(t, zoneRules(tt.rule)).Evaluate(tt.in)
			tt.want.Key = pZone
			want := Result{Segments: map[string]string{}, Rules: []RuleResult{tt.want}}
			if tt.want.Status == StatusMatched {
				want.Segments[pZone] = tt.want.Value
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Evaluate (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEvaluateTemplates(t *testing.T) {
	tests := []struct {
		name     string
		regex    string
		template string
		input    string
		want     string // rendered value when status is matched
		status   string
		reason   string
	}{
		{name: "defaults", input: "node-7", want: "node-7", status: StatusMatched},
		{name: "numbered group", regex: `node-(\d+)`, template: "{match:1}", input: "node-7", want: "7", status: StatusMatched},
		{name: "dollar form", regex: `node-(\d+)`, template: "${match:1}", input: "node-7", want: "7", status: StatusMatched},
		{name: "match 0 is the whole input", regex: `node-(\d+)`, template: "{match:0}", input: "node-7", want: "node-7", status: StatusMatched},
		{name: "named group", regex: `(?<zone>[a-z]+)-\d+`, template: "{match:zone}", input: "eu-12", want: "eu", status: StatusMatched},
		{name: "dollar named group", regex: `(?<zone>[a-z]+)-\d+`, template: "${match:zone}", input: "eu-12", want: "eu", status: StatusMatched},
		{name: "literal text around", regex: `node-(\d+)`, template: "zone-{match:1}.a", input: "node-7", want: "zone-7.a", status: StatusMatched},
		{name: "groups reordered and repeated", regex: `(\w+)-(\w+)`, template: "{match:2}_{match:1}_${match:2}", input: "eu-west", want: "west_eu_west", status: StatusMatched},
		{name: "literal only", regex: `gpu-.*`, template: "gpu", input: "gpu-node-3", want: "gpu", status: StatusMatched},
		{name: "literal braces and dollar", regex: `(.*)`, template: "{x}$", input: "a", status: StatusError, reason: `rendered value "{x}$" is not a valid label value: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`},
		{name: "non-participating group renders empty", regex: `(a)|(b)`, template: "x{match:1}{match:2}", input: "b", want: "xb", status: StatusMatched},
		{name: "only non-participating groups", regex: `(a)?b`, template: "{match:1}", input: "b", status: StatusSkipped, reason: "rendered value is empty"},
		// regexp2 numbers named groups after unnamed ones (.NET rules, even
		// with the ECMAScript option): pinned so a library change is noticed.
		{name: "named groups numbered last", regex: `(?<z>a)(b)`, template: "{match:1}{match:2}", input: "ab", want: "ba", status: StatusMatched},
		{name: "inline ignore case", regex: `(?i)NODE-(\d)`, template: "{match:1}", input: "node-1", want: "1", status: StatusMatched},
		{name: "anchored at both ends", regex: `node`, input: "node-1", status: StatusSkipped, reason: `regex did not match "node-1"`},
		{name: "anchor wraps alternation", regex: `a|b`, input: "ab", status: StatusSkipped, reason: `regex did not match "ab"`},
		{name: "dot does not cross lines", regex: `.*`, input: "a\nb", status: StatusSkipped, reason: `regex did not match "a\nb"`},
		{name: "ECMAScript \\d is ASCII", regex: `\d+`, input: "١٢", status: StatusSkipped, reason: `regex did not match "١٢"`},
		{name: "backreference", regex: `(a+)-\1`, template: "{match:1}", input: "aa-aa", want: "aa", status: StatusMatched},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := mustCompile(t, zoneRules(Rule{TopologyKey: "zone", Source: SourceNodeName, Regex: tt.regex, Template: tt.template}))
			got := e.Evaluate(Inputs{NodeName: tt.input})
			want := Result{
				Segments: map[string]string{},
				Rules: []RuleResult{{
					Key: pZone, Source: SourceNodeName, Input: tt.input,
					Value: tt.want, Status: tt.status, Reason: tt.reason,
				}},
			}
			if tt.status == StatusMatched {
				want.Segments[pZone] = tt.want
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Evaluate (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEvaluateInvalidValue(t *testing.T) {
	long := strings.Repeat("a", 64)
	tests := []struct {
		name, input, reason string
	}{
		{"space", "a b", `rendered value "a b" is not a valid label value: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`},
		{"too long", long, `rendered value "` + long + `" is not a valid label value: must be no more than 63 bytes`},
		{"trailing dash", "a-", `rendered value "a-" is not a valid label value: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`},
		{"slash", "eu/1", `rendered value "eu/1" is not a valid label value: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := mustCompile(t, zoneRules(Rule{TopologyKey: "zone", Source: SourceEnv, EnvName: "ZONE"}))
			got := e.Evaluate(Inputs{Env: map[string]string{"ZONE": tt.input}})
			want := Result{
				Segments: map[string]string{},
				Rules:    []RuleResult{{Key: pZone, Source: "env ZONE", Input: tt.input, Status: StatusError, Reason: tt.reason}},
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Evaluate (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEvaluateLongInputIsShortenedForDisplay(t *testing.T) {
	input := strings.Repeat("ä", 100) // 200 bytes
	e := mustCompile(t, zoneRules(Rule{TopologyKey: "zone", Source: SourceEnv, EnvName: "ZONE", Regex: "b"}))
	got := e.Evaluate(Inputs{Env: map[string]string{"ZONE": input}})
	shown := strings.Repeat("ä", 64) + "…"
	want := []RuleResult{{Key: pZone, Source: "env ZONE", Input: shown, Status: StatusSkipped, Reason: `regex did not match "` + shown + `"`}}
	if diff := cmp.Diff(want, got.Rules); diff != "" {
		t.Errorf("Rules (-want +got):\n%s", diff)
	}
}

func TestEvaluateFallbackAndShadowing(t *testing.T) {
	envZone := Rule{TopologyKey: "zone", Source: SourceEnv, EnvName: "ZONE"}
	fileZone := Rule{TopologyKey: "zone", Source: SourceFile, File: "/etc/zone"}
	nameZone := Rule{TopologyKey: "zone", Source: SourceNodeName, Regex: `(\w+)-.*`, Template: "{match:1}"}
	envRegion := Rule{TopologyKey: "region", Source: SourceEnv, EnvName: "REGION"}
	k8sZone := Rule{TopologyKey: "topology.kubernetes.io/zone", Source: SourceEnv, EnvName: "ZONE"}
	fullZone := Rule{TopologyKey: pZone, Source: SourceEnv, EnvName: "ZONE"}

	tests := []struct {
		name     string
		cfg      Config
		in       Inputs
		segments map[string]string
		rules    []RuleResult
	}{
		{
			name:     "later rule is a fallback",
			cfg:      zoneRules(envZone, fileZone, nameZone),
			in:       Inputs{NodeName: "eu-7", Files: map[string]FileInput{"/etc/zone": {Content: "z2\n"}}},
			segments: map[string]string{pZone: "z2"},
			rules: []RuleResult{
				{Index: 0, Key: pZone, Source: "env ZONE", Status: StatusSkipped, Reason: "env ZONE is not set"},
				{Index: 1, Key: pZone, Source: "file /etc/zone", Input: "z2", Value: "z2", Status: StatusMatched},
				{Index: 2, Key: pZone, Source: "nodeName", Status: StatusShadowed, Reason: "key already set by rule 1"},
			},
		},
		{
			name:     "fallback after an error",
			cfg:      zoneRules(envZone, nameZone),
			in:       Inputs{NodeName: "eu-7", Env: map[string]string{"ZONE": "bad value"}},
			segments: map[string]string{pZone: "eu"},
			rules: []RuleResult{
				{Index: 0, Key: pZone, Source: "env ZONE", Input: "bad value", Status: StatusError, Reason: `rendered value "bad value" is not a valid label value: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`},
				{Index: 1, Key: pZone, Source: "nodeName", Input: "eu-7", Value: "eu", Status: StatusMatched},
			},
		},
		{
			name:     "first match wins",
			cfg:      zoneRules(envZone, nameZone),
			in:       Inputs{NodeName: "eu-7", Env: map[string]string{"ZONE": "z1"}},
			segments: map[string]string{pZone: "z1"},
			rules: []RuleResult{
				{Index: 0, Key: pZone, Source: "env ZONE", Input: "z1", Value: "z1", Status: StatusMatched},
				{Index: 1, Key: pZone, Source: "nodeName", Status: StatusShadowed, Reason: "key already set by rule 0"},
			},
		},
		{
			name:     "different keys are independent",
			cfg:      zoneRules(envZone, envRegion),
			in:       Inputs{Env: map[string]string{"ZONE": "z1", "REGION": "r1"}},
			segments: map[string]string{pZone: "z1", pRegion: "r1"},
			rules: []RuleResult{
				{Index: 0, Key: pZone, Source: "env ZONE", Input: "z1", Value: "z1", Status: StatusMatched},
				{Index: 1, Key: pRegion, Source: "env REGION", Input: "r1", Value: "r1", Status: StatusMatched},
			},
		},
		{
			name:     "prefixed and verbatim keys do not collide",
			cfg:      zoneRules(envZone, k8sZone),
			in:       Inputs{Env: map[string]string{"ZONE": "z1"}},
			segments: map[string]string{pZone: "z1", "topology.kubernetes.io/zone": "z1"},
			rules: []RuleResult{
				{Index: 0, Key: pZone, Source: "env ZONE", Input: "z1", Value: "z1", Status: StatusMatched},
				{Index: 1, Key: "topology.kubernetes.io/zone", Source: "env ZONE", Input: "z1", Value: "z1", Status: StatusMatched},
			},
		},
		{
			name:     "short and full spelling of one key collide",
			cfg:      zoneRules(envZone, fullZone),
			in:       Inputs{Env: map[string]string{"ZONE": "z1"}},
			segments: map[string]string{pZone: "z1"},
			rules: []RuleResult{
				{Index: 0, Key: pZone, Source: "env ZONE", Input: "z1", Value: "z1", Status: StatusMatched},
				{Index: 1, Key: pZone, Source: "env ZONE", Status: StatusShadowed, Reason: "key already set by rule 0"},
			},
		},
		{
			name:     "custom prefix",
			cfg:      Config{Type: TypeZone, Prefix: "example.com", FromRegexp: []Rule{envZone, k8sZone}},
			in:       Inputs{Env: map[string]string{"ZONE": "z1"}},
			segments: map[string]string{"example.com/zone": "z1", "topology.kubernetes.io/zone": "z1"},
			rules: []RuleResult{
				{Index: 0, Key: "example.com/zone", Source: "env ZONE", Input: "z1", Value: "z1", Status: StatusMatched},
				{Index: 1, Key: "topology.kubernetes.io/zone", Source: "env ZONE", Input: "z1", Value: "z1", Status: StatusMatched},
			},
		},
		{
			name:     "base segment is set first",
			cfg:      Config{FromRegexp: []Rule{{TopologyKey: "cluster", Source: SourceEnv, EnvName: "ZONE"}}},
			in:       Inputs{Env: map[string]string{"ZONE": "z1"}},
			segments: map[string]string{DefaultPrefix + "/cluster": "local"},
			rules: []RuleResult{
				{Index: 0, Key: DefaultPrefix + "/cluster", Source: "env ZONE", Status: StatusShadowed, Reason: "key already set by type cluster"},
			},
		},
		{
			name:     "rule fills a node key the base could not",
			cfg:      Config{Type: TypeNode, FromRegexp: []Rule{{TopologyKey: "node", Source: SourceNodeName, Regex: `(.{1,63}).*`, Template: "{match:1}"}}},
			in:       Inputs{NodeName: strings.Repeat("n", 70)},
			segments: map[string]string{DefaultPrefix + "/node": strings.Repeat("n", 63)},
			rules: []RuleResult{
				{Index: 0, Key: DefaultPrefix + "/node", Source: "nodeName", Input: strings.Repeat("n", 70), Value: strings.Repeat("n", 63), Status: StatusMatched},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustCompile(t, tt.cfg).Evaluate(tt.in)
			if diff := cmp.Diff(tt.segments, got.Segments); diff != "" {
				t.Errorf("Segments (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.rules, got.Rules); diff != "" {
				t.Errorf("Rules (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEvaluateBase(t *testing.T) {
	zoneRule := Rule{TopologyKey: "zone", Source: SourceEnv, EnvName: "ZONE"}
	tests := []struct {
		name     string
		cfg      Config
		nodeName string
		want     Result
	}{
		{
			name:     "cluster",
			cfg:      Config{Type: TypeCluster},
			nodeName: "n1",
			want: Result{
				Segments: map[string]string{DefaultPrefix + "/cluster": "local"},
				Base:     &RuleResult{Index: BaseIndex, Key: DefaultPrefix + "/cluster", Source: "type cluster", Value: "local", Status: StatusMatched},
				Rules:    []RuleResult{},
			},
		},
		{
			name: "empty type is cluster, custom prefix",
			cfg:  Config{Prefix: "example.com"},
			want: Result{
				Segments: map[string]string{"example.com/cluster": "local"},
				Base:     &RuleResult{Index: BaseIndex, Key: "example.com/cluster", Source: "type cluster", Value: "local", Status: StatusMatched},
				Rules:    []RuleResult{},
			},
		},
		{
			name:     "node",
			cfg:      Config{Type: TypeNode},
			nodeName: "worker-1.example.com",
			want: Result{
				Segments: map[string]string{DefaultPrefix + "/node": "worker-1.example.com"},
				Base:     &RuleResult{Index: BaseIndex, Key: DefaultPrefix + "/node", Source: "type node", Input: "worker-1.example.com", Value: "worker-1.example.com", Status: StatusMatched},
				Rules:    []RuleResult{},
			},
		},
		{
			name:     "node name too long",
			cfg:      Config{Type: TypeNode},
			nodeName: strings.Repeat("n", 64),
			want: Result{
				Segments: map[string]string{},
				Base: &RuleResult{
					Index: BaseIndex, Key: DefaultPrefix + "/node", Source: "type node", Input: strings.Repeat("n", 64), Status: StatusError,
					Reason: `node name "` + strings.Repeat("n", 64) + `" is not a valid label value: must be no more than 63 bytes`,
				},
				Rules: []RuleResult{},
			},
		},
		{
			name: "node name unknown",
			cfg:  Config{Type: TypeNode},
			want: Result{
				Segments: map[string]string{},
				Base:     &RuleResult{Index: BaseIndex, Key: DefaultPrefix + "/node", Source: "type node", Status: StatusError, Reason: "node name is not known"},
				Rules:    []RuleResult{},
			},
		},
		{
			name:     "zone has no base",
			cfg:      Config{Type: TypeZone, FromRegexp: []Rule{zoneRule}},
			nodeName: "n1",
			want: Result{
				Segments: map[string]string{},
				Rules:    []RuleResult{{Key: pZone, Source: "env ZONE", Status: StatusSkipped, Reason: "env ZONE is not set"}},
			},
		},
		{
			name:     "custom is zone",
			cfg:      Config{Type: TypeCustom, FromRegexp: []Rule{zoneRule}},
			nodeName: "n1",
			want: Result{
				Segments: map[string]string{},
				Rules:    []RuleResult{{Key: pZone, Source: "env ZONE", Status: StatusSkipped, Reason: "env ZONE is not set"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustCompile(t, tt.cfg).Evaluate(Inputs{NodeName: tt.nodeName})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Evaluate (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEvaluateFileTrimming(t *testing.T) {
	tests := []struct {
		name, content, input string
		status               string
	}{
		{"newline", "z1\n", "z1", StatusMatched},
		{"crlf", "z1\r\n", "z1", StatusMatched},
		{"spaces and tabs", "z1  \t \n\n", "z1", StatusMatched},
		{"no trailing whitespace", "z1", "z1", StatusMatched},
		{"leading whitespace is kept", "  z1\n", "  z1", StatusError},
		{"inner newline is kept", "z1\nz2\n", "z1\nz2", StatusSkipped},
		{"only whitespace", " \n", "", StatusSkipped},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// [^\n]* so that the inner-newline case is a non-match, not an
			// invalid value.
			e := mustCompile(t, zoneRules(Rule{TopologyKey: "zone", Source: SourceFile, File: "/etc/zone", Regex: `[^\n]*`}))
			got := e.Evaluate(Inputs{Files: map[string]FileInput{"/etc/zone": {Content: tt.content}}})
			rr := got.Rules[0]
			if rr.Input != tt.input || rr.Status != tt.status {
				t.Errorf("Input=%q Status=%s (%s), want Input=%q Status=%s", rr.Input, rr.Status, rr.Reason, tt.input, tt.status)
			}
		})
	}
}

func TestEvaluateMatchTimeout(t *testing.T) {
	e := mustCompile(t, zoneRules(
		Rule{TopologyKey: "zone", Source: SourceEnv, EnvName: "ZONE", Regex: `(a+)+b`},
		Rule{TopologyKey: "zone", Source: SourceNodeName},
	))
	input := strings.Repeat("a", 5000)
	start := time.Now()
	got := e.Evaluate(Inputs{NodeName: "fallback", Env: map[string]string{"ZONE": input}})
	// Generous bound: the point is "does not hang", not the exact timeout,
	// and the race detector slows the matcher down.
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("Evaluate took %v, want well under 5s", elapsed)
	}
	want := Result{
		Segments: map[string]string{pZone: "fallback"},
		Rules: []RuleResult{
			{Index: 0, Key: pZone, Source: "env ZONE", Input: display(input), Status: StatusError, Reason: fmt.Sprintf("match timed out after %v", MatchTimeout)},
			{Index: 1, Key: pZone, Source: "nodeName", Input: "fallback", Value: "fallback", Status: StatusMatched},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Evaluate (-want +got):\n%s", diff)
	}
	if got.Rules[0].Reason != "match timed out after 100ms" {
		t.Errorf("reason %q does not name the timeout", got.Rules[0].Reason)
	}
}

func TestEvaluateIsSafeForConcurrentUse(t *testing.T) {
	e := mustCompile(t, zoneRules(Rule{TopologyKey: "zone", Source: SourceNodeName, Regex: `(?<z>\w+)-\d+`, Template: "{match:z}"}))
	done := make(chan Result)
	for i := range 8 {
		go func() { done <- e.Evaluate(Inputs{NodeName: fmt.Sprintf("z%d-1", i)}) }()
	}
	seen := map[string]bool{}
	for range 8 {
		seen[(<-done).Segments[pZone]] = true
	}
	if len(seen) != 8 {
		t.Errorf("got %d distinct values, want 8: %v", len(seen), seen)
	}
}
