package nodetopology

import (
	"errors"
	"strings"
	"testing"

	"github.com/democratic-csi/proxy-topology/pkg/labels"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Run a fuzzer with a short minimization budget, e.g.
//
//	go test -run '^$' -fuzz '^FuzzEvaluate$' -fuzztime 30s -fuzzminimizetime 2s ./pkg/nodetopology/
//
// An input that hits the match timeout costs ~200ms per execution (MatchTimeout
// plus regexp2's 100ms clock tick), and minimizing one under the default 60s
// budget shows as "execs: N (0/sec)" for up to a minute: slow, not hung.

// checkCompileErr asserts that every Compile problem is a *FieldError under
// proxy.nodeTopology, so a config error always names its key path.
func checkCompileErr(t *testing.T, err error) {
	t.Helper()
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var fe *FieldError
		if !errors.As(e, &fe) || !strings.HasPrefix(fe.Path, configPath) {
			t.Fatalf("Compile error %q does not name a key path", e)
		}
	}
}

// checkResult asserts the invariants every Result must keep, whatever the
// rules and inputs: only valid labels reach kubelet, and Err agrees with
// Segments.
func checkResult(t *testing.T, res Result, nRules int) {
	t.Helper()
	if res.Segments == nil {
		t.Fatal("Segments is nil")
	}
	for k, v := range res.Segments {
		if err := labels.KeyError(k); err != nil {
			t.Fatalf("segment key %q is invalid: %v", k, err)
		}
		if err := labels.ValueError(v); err != nil || v == "" {
			t.Fatalf("segment %q has invalid value %q: %v", k, v, err)
		}
	}
	if len(res.Rules) != nRules {
		t.Fatalf("got %d rule results, want %d", len(res.Rules), nRules)
	}
	for i, rr := range res.Rules {
		if rr.Index != i {
			t.Fatalf("rule result %d has Index %d", i, rr.Index)
		}
		switch rr.Status {
		case StatusMatched:
			if res.Segments[rr.Key] != rr.Value {
				t.Fatalf("rule %d matched %q but segment %q is %q", i, rr.Value, rr.Key, res.Segments[rr.Key])
			}
		case StatusSkipped, StatusShadowed, StatusError:
			if rr.Reason == "" || rr.Value != "" {
				t.Fatalf("rule %d %s with reason %q and value %q", i, rr.Status, rr.Reason, rr.Value)
			}
		default:
			t.Fatalf("rule %d has unknown status %q", i, rr.Status)
		}
		if len(rr.Input) > maxDisplay+len("…") {
			t.Fatalf("rule %d Input is %d bytes, not shortened", i, len(rr.Input))
		}
	}
	err := res.Err()
	switch {
	case len(res.Segments) > 0 && err != nil:
		t.Fatalf("Err() = %v with segments %v", err, res.Segments)
	case len(res.Segments) == 0 && status.Code(err) != codes.FailedPrecondition:
		t.Fatalf("Err() = %v without segments, want FailedPrecondition", err)
	}
}

func FuzzRenderTemplate(f *testing.F) {
	f.Add("(.*)", "{match:0}", "node-1")
	f.Add(`node-(\d+)`, "zone-{match:1}", "node-7")
	f.Add(`(?<zone>[a-z]+)-(\d)`, "${match:zone}.{match:2}", "eu-1")
	f.Add(`(a)|(b)`, "x{match:1}{match:2}", "b")
	f.Add(`(a+)+b`, "{match:1}", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	f.Add("a)|(b", "{match:0}", "b")
	f.Add(".*", "{match:", "x")
	f.Fuzz(func(t *testing.T, regex, tmpl, input string) {
		e, err := Compile(zoneRules(Rule{TopologyKey: "zone", Source: SourceNodeName, Regex: regex, Template: tmpl}))
		if err != nil {
			checkCompileErr(t, err)
			return
		}
		res := e.Evaluate(Inputs{NodeName: input})
		checkResult(t, res, 1)
		if rr := res.Rules[0]; rr.Status == StatusShadowed {
			t.Fatalf("single rule reported shadowed: %+v", rr)
		}
	})
}

func FuzzEvaluate(f *testing.F) {
	f.Add("", "", "zone", SourceNodeName, "", "(.*)", "{match:0}", "node-1", "host-1", "z1", true)
	f.Add(TypeNode, "example.com", "topology.kubernetes.io/zone", SourceEnv, "ZONE", `z-(\w+)`, "{match:1}", "Node_1", "", "z-a", true)
	f.Add(TypeZone, "", "zone", SourceFile, "/etc/zone", "", "", "n", "h", "z1\r\n", true)
	f.Add(TypeCustom, "", "zone", SourceNodeLabel, "topology.kubernetes.io/zone", "", "", "n", "h", "eu-1a", false)
	f.Add(TypeCluster, "", "cluster", SourceHostname, "", ".*", "a b", "n", "h", "", false)
	f.Fuzz(func(t *testing.T, typ, prefix, key, source, arg, regex, tmpl, nodeName, hostname, value string, present bool) {
		rule := Rule{TopologyKey: key, Source: source, Regex: regex, Template: tmpl}
		switch source {
		case SourceEnv:
			rule.EnvName = arg
		case SourceFile:
			rule.File = arg
		case SourceNodeLabel:
			rule.Label = arg
		}
		// A second rule for the same key exercises fallback and shadowing.
		cfg := Config{Type: typ, Prefix: prefix, FromRegexp: []Rule{rule, {TopologyKey: key, Source: SourceNodeName}}}
		e, err := Compile(cfg)
		if err != nil {
			checkCompileErr(t, err)
			return
		}
		in := Inputs{NodeName: nodeName, Hostname: hostname}
		if present {
			in.Env = map[string]string{arg: value}
			in.Files = map[string]FileInput{arg: {Content: value}}
			in.Labels = map[string]string{arg: value}
		}
		res := e.Evaluate(in)
		checkResult(t, res, 2)
		if r0, r1 := res.Rules[0], res.Rules[1]; r0.Status == StatusMatched && r1.Status != StatusShadowed {
			t.Fatalf("rule 1 for the same key was not shadowed: %+v", r1)
		}
	})
}
