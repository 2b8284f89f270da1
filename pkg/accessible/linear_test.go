package accessible

import (
	"fmt"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
)

// steps is the work f does on terms, as countStep counts it: each pair of
// terms compared and each term's key built for a set.
func steps(f func()) int {
	n := 0
	countStep = func() { n++ }
	defer func() { countStep = nil }()
	f()
	return n
}

// distinctTerms are n requisite terms in 20 zones, each with a rack of
// its own, so no two are equal and none is dropped as a duplicate.
func distinctTerms(n int) []*csi.Topology {
	out := make([]*csi.Topology, n)
	for i := range out {
		out[i] = topo(pk("zone"), fmt.Sprintf("z%d", i%20), pk("rack"), fmt.Sprintf("r%d", i))
	}
	return out
}

// TestLinearInTerms (issue 38, probe 1): the topology work of one
// CreateVolume grows linearly with its terms. 10,000 requisite terms on a
// connection with upstreamTopology cost 4.8 s of CPU (39 ms without the
// map): the requirement sent upstream removed duplicates by comparing each
// term with every term kept. The work is counted, not timed: at 2n terms
// at most 2.2 times the work at n, and at most 12 steps a term.
func TestLinearInTerms(t *testing.T) {
	mapped := CompileSpec(Spec{Upstream: map[string]string{"up.example.com/zone": "zone", "up.example.com/rack": "rack"}}, zoneOpts)
	plain := CompileSpec(Spec{}, zoneOpts)
	local := CompileSpec(Spec{Upstream: map[string]string{"up.example.com/node": "node"}}, zoneOpts)
	listed := CompileSpec(Spec{Entries: []Entry{zoneEntry("z1"), zoneEntry("z2")}}, zoneOpts)
	host := Host{Name: "node-1"}
	cases := map[string]func(terms []*csi.Topology){
		"requirement sent upstream": func(terms []*csi.Topology) {
			if got := mapped.Upstream().Requirement(&csi.TopologyRequirement{Requisite: terms, Preferred: terms}); len(got.GetRequisite()) != len(terms) {
				t.Fatalf("Requirement kept %d of %d distinct terms", len(got.GetRequisite()), len(terms))
			}
		},
		"decide without a list": func(terms []*csi.Topology) {
			if d, err := (Placement{Host: host}).Decide("c", plain, terms, rotate(terms, 7)); err != nil || len(d.Topologies()) != len(terms) {
				t.Fatalf("Decide = %d topologies, %v", len(d.Topologies()), err)
			}
		},
		"decide with a list": func(terms []*csi.Topology) {
			if _, err := (Placement{Host: host}).Decide("c", listed, terms, rotate(terms, 7)); err != nil {
				t.Fatal(err)
			}
		},
		"mapped answer": func(terms []*csi.Topology) {
			d, err := (Placement{Host: host}).Created("c.yaml", mapped, Decision{}, topos(topo("up.example.com/zone", "z1")), terms)
			if err != nil || d.Everywhere() {
				t.Fatalf("Created = %v, %v", d.Topologies(), err)
			}
		},
		"mapped answer echoing the request": func(terms []*csi.Topology) {
			answer := make([]*csi.Topology, len(terms))
			for i, q := range terms {
				answer[i] = topo("up.example.com/zone", q.Segments[pk("zone")], "up.example.com/rack", q.Segments[pk("rack")])
			}
			d, err := (Placement{Host: host}).Created("c.yaml", mapped, Decision{}, answer, terms)
			if err != nil || len(d.Topologies()) != len(terms) {
				t.Fatalf("Created = %d topologies, %v", len(d.Topologies()), err)
			}
		},
		"node-local refusal": func(terms []*csi.Topology) {
			nodes := make([]*csi.Topology, len(terms))
			for i := range nodes {
				nodes[i] = topo(pk("node"), fmt.Sprintf("n%d", i))
			}
			if _, err := (Placement{Host: host}).Decide("c", local, nodes, nil); err == nil {
				t.Fatal("a request for other nodes was decided here")
			}
		},
	}
	const n = 1000
	for name, run := range cases {
		t.Run(name, func(t *testing.T) {
			small, large := distinctTerms(n), distinctTerms(2*n)
			atN, at2N := steps(func() { run(small) }), steps(func() { run(large) })
			t.Logf("%d terms: %d steps; %d terms: %d steps", n, atN, 2*n, at2N)
			if at2N > 12*2*n || float64(at2N) > 2.2*float64(max(atN, 1)) {
				t.Errorf("%d terms take %d steps, %d terms %d: the work is not linear in the terms", n, atN, 2*n, at2N)
			}
		})
	}
}
