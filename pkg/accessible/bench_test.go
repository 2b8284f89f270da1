package accessible

import (
	"fmt"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
)

// benchRequest is an Immediate claim under --immediate-topology=true in a
// 100-node cluster over 20 zones: one requisite term per node, preferred
// rotated, as the external-provisioner sends it.
func benchRequest() *csi.TopologyRequirement {
	terms := make([]*csi.Topology, 100)
	for i := range terms {
		terms[i] = topo(pk("zone"), fmt.Sprintf("z%02d", i%20), pk("node"), fmt.Sprintf("n%03d", i))
	}
	return &csi.TopologyRequirement{Requisite: terms, Preferred: rotate(terms, 37)}
}

// benchEntries offers 20 zones in 3 regions, each with an extra label.
func benchEntries(zonePrefix string) []Entry {
	entries := make([]Entry, 20)
	for i := range entries {
		entries[i] = Entry{
			Requirements: kvs("zone", fmt.Sprintf("%s%02d", zonePrefix, i), "region", fmt.Sprintf("r%d", i%3)),
			Extra:        kvs("custom.io/storage", "fast"),
		}
	}
	return entries
}

func BenchmarkDecide(b *testing.B) {
	req, entries := benchRequest(), benchEntries("z")
	b.ReportAllocs()
	for b.Loop() {
		if got, err := Decide("c1", req, entries, zoneOpts); err != nil || len(got) != 20 {
			b.Fatalf("Decide = %d topologies, %v", len(got), err)
		}
	}
}

// BenchmarkCompiledDecide is what a proxied CreateVolume pays: the
// connection's list is compiled when the file is loaded, so a call only
// matches terms and copies the chosen topologies.
func BenchmarkCompiledDecide(b *testing.B) {
	req, c := benchRequest(), Compile(benchEntries("z"), zoneOpts)
	requisite, preferred := req.Requisite, req.Preferred
	b.ReportAllocs()
	for b.Loop() {
		d, err := c.Decide("c1", requisite, preferred)
		if got := d.Topologies(); err != nil || len(got) != 20 {
			b.Fatalf("Decide = %d topologies, %v", len(got), err)
		}
	}
}

// The refusal scans every term for every entry and builds the message.
func BenchmarkDecideNoMatch(b *testing.B) {
	req, entries := benchRequest(), benchEntries("other")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decide("c1", req, entries, zoneOpts); err == nil {
			b.Fatal("Decide succeeded")
		}
	}
}

func BenchmarkAdmits(b *testing.B) {
	term, c := topo(pk("zone"), "z19", pk("node"), "n019"), Compile(benchEntries("z"), zoneOpts)
	b.ReportAllocs()
	for b.Loop() {
		if !c.Admits(term) {
			b.Fatal("not served")
		}
	}
}

// BenchmarkCompiledDecideOneTerm is the common CreateVolume: a strict
// WaitForFirstConsumer claim (one requisite term, the same preferred) on a
// connection that offers two zones.
func BenchmarkCompiledDecideOneTerm(b *testing.B) {
	term := topo(pk("zone"), "z01", pk("node"), "n001")
	c := Compile(benchEntries("z")[:2], zoneOpts)
	requisite, preferred := []*csi.Topology{term}, []*csi.Topology{term}
	b.ReportAllocs()
	for b.Loop() {
		d, err := c.Decide("c1", requisite, preferred)
		if got := d.Topologies(); err != nil || len(got) != 1 {
			b.Fatalf("Decide = %d topologies, %v", len(got), err)
		}
	}
}

// createTopology is the topology work of one CreateVolume with n
// requisite terms (an Immediate class on a node-keyed map sends one per
// node) and the same preferred, on a connection with upstreamTopology
// when mapped (the decision, the requirement translated back, the
// upstream's one-term answer translated and checked), else on one
// without (the decision alone). It returns the call to repeat.
func createTopology(tb testing.TB, mapped bool, n int) func() {
	host := Placement{Host: Host{Name: "node-1"}}
	spec, answer := Spec{}, []*csi.Topology(nil)
	if mapped {
		spec = Spec{Upstream: map[string]string{"up.example.com/zone": "zone", "up.example.com/rack": "rack"}}
		answer = topos(topo("up.example.com/zone", "z1"))
	}
	c := CompileSpec(spec, zoneOpts)
	terms := distinctTerms(n)
	preferred := rotate(terms, 37)
	return func() {
		d, err := host.Decide("c1", c, terms, preferred)
		if err != nil {
			tb.Fatal(err)
		}
		_ = c.Upstream().Requirement(&csi.TopologyRequirement{Requisite: terms, Preferred: preferred})
		if d, err = host.Created("c1.yaml", c, d, answer, terms); err != nil || d.Everywhere() {
			tb.Fatalf("Created = %v, %v", d.Topologies(), err)
		}
		_ = d.Topologies()
	}
}

// BenchmarkCreateTopology is createTopology with 1,000 and 10,000 terms,
// mapped and unmapped, each on its own (wall time; for a reader). The
// goals are BenchmarkCreateTopologyCPU's ratios.
func BenchmarkCreateTopology(b *testing.B) {
	for _, mapped := range []bool{false, true} {
		for _, n := range []int{1000, 10000} {
			name := fmt.Sprintf("unmapped/%d", n)
			if mapped {
				name = fmt.Sprintf("mapped/%d", n)
			}
			run := createTopology(b, mapped, n)
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					run()
				}
			})
		}
	}
}
