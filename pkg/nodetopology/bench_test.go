package nodetopology

import (
	"fmt"
	"testing"
)

// benchRules is a large but plausible rule set: 50 rules over 25 keys, two
// per key (a primary and a fallback), reading every source kind, with named
// and numbered groups. Half of the primaries do not match their input, so
// their fallback runs; the other fallbacks are shadowed.
func benchRules() (Config, Inputs) {
	sources := []string{SourceNodeName, SourceHostname, SourceEnv, SourceFile, SourceNodeLabel}
	in := Inputs{
		NodeName: "worker-zone3-rack12-node07",
		Hostname: "worker-zone3-rack12-node07.dc1.example.com",
		Env:      map[string]string{},
		Files:    map[string]FileInput{},
		Labels:   map[string]string{},
	}
	var rules []Rule
	for k := 0; k < 25; k++ {
		key := fmt.Sprintf("key%02d", k)
		for alt := 0; alt < 2; alt++ {
			r := Rule{TopologyKey: key, Source: sources[(2*k+alt)%len(sources)]}
			value := fmt.Sprintf("worker-zone%d-rack%d-node%02d", k%4, k, alt)
			// nodeName and hostname rules read the fixed in.NodeName and
			// in.Hostname; the other sources get value.
			switch r.Source {
			case SourceEnv:
				r.EnvName = fmt.Sprintf("TOPO_%d_%d", k, alt)
				in.Env[r.EnvName] = value
			case SourceFile:
				r.File = fmt.Sprintf("/etc/topology/%d-%d", k, alt)
				in.Files[r.File] = FileInput{Content: value + "\n"}
			case SourceNodeLabel:
				r.Label = fmt.Sprintf("example.com/topo-%d-%d", k, alt)
				in.Labels[r.Label] = value
			}
			switch {
			case alt == 0 && k%2 == 1:
				r.Regex, r.Template = `nomatch-(\d+)`, "{match:1}"
			case alt == 0:
				r.Regex, r.Template = `worker-(?<zone>zone\d+)-rack(\d+)-.*`, "{match:zone}-r${match:2}"
			default:
				r.Regex, r.Template = `([a-z]+)-(zone\d+).*`, "{match:2}"
			}
			rules = append(rules, r)
		}
	}
	return Config{Type: TypeCluster, FromRegexp: rules}, in
}

func BenchmarkEvaluate(b *testing.B) {
	cfg, in := benchRules()
	e, err := Compile(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if n := len(e.Evaluate(in).Segments); n != 26 {
		b.Fatalf("Evaluate set %d segments, want 26 (base + 25 keys)", n)
	}
	b.ReportAllocs()
	for b.Loop() {
		e.Evaluate(in)
	}
}
