package accessible

import (
	"math/rand/v2"
	"slices"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
)

// TestRequisiteIndexMatchesBruteForce: the index finds exactly the terms,
// in order, that comparing the answer term with each requisite term finds,
// over terms naming different sets of keys.
func TestRequisiteIndexMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 38))
	keys := []string{"a", "b", "c", "1:a1:b", "1:a", ""} // keys that could collide when joined
	randomTerm := func() *csi.Topology {
		m := map[string]string{}
		for _, k := range keys {
			if r.IntN(3) > 0 {
				m[k] = []string{"1", "2", "3"}[r.IntN(3)]
			}
		}
		return &csi.Topology{Segments: m}
	}
	for round := range 200 {
		requisite := make([]*csi.Topology, r.IntN(30))
		for i := range requisite {
			requisite[i] = randomTerm()
		}
		index := newRequisiteIndex(requisite)
		for range 10 {
			term := sortedSegments(randomTerm().Segments)
			var want []int
			for j, q := range requisite {
				if matches(q, term) {
					want = append(want, j)
				}
			}
			if got := index.matching(term); !slices.Equal(got, want) {
				t.Fatalf("round %d: term %v matches %v, want %v (requisite %v)", round, term, got, want, requisite)
			}
		}
	}
}
