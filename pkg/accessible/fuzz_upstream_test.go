package accessible

import (
	"maps"
	"slices"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/proto"

	"github.com/democratic-csi/proxy-topology/pkg/labels"
)

// FuzzAnswer checks upstreamTopology's rules on arbitrary maps, answers
// and requirements: no panic; the inputs are never changed; an accepted
// answer uses only the proxy's keys (every key a map target, a narrowing
// requisite key, or an entry's segment) with valid label values, and lies
// inside the requisite (some requisite term agrees with each topology on
// their shared keys); a node-local connection's accepted answer to a
// non-empty upstream answer is never "everywhere"; a requirement sent
// upstream uses only upstream keys of the map.
func FuzzAnswer(f *testing.F) {
	f.Add([]byte{0, 0, 1, 1, 2, 3, 1, 0, 2, 1, 2, 1, 5, 0})
	f.Add([]byte{0, 2, 2, 0, 4, 6, 0, 3, 1, 3, 1, 4, 2, 2, 1, 6, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		req, entries, opts := decodeFuzz(data)
		in := &fuzzInput{data: data[min(len(data), len(data)/2):]}
		m := in.pairs(int(in.byte()%4), fuzzKeys)
		answer := in.terms()
		if ValidateUpstream(m, entries, opts) != nil || Validate(entries, opts) != nil {
			return // the server never loads such a file
		}
		before := proto.Clone(&csi.TopologyRequirement{Requisite: answer})
		reqBefore := proto.Clone(req)
		mBefore := maps.Clone(m)
		c := CompileSpec(Spec{Entries: entries, Upstream: m}, opts)
		d, err := c.Answer(answer, req.GetRequisite())
		up := c.Upstream().Requirement(req)
		if !proto.Equal(before, &csi.TopologyRequirement{Requisite: answer}) || !proto.Equal(reqBefore, req) || !maps.Equal(mBefore, m) {
			t.Fatal("an input was changed")
		}
		for _, list := range [][]*csi.Topology{up.GetRequisite(), up.GetPreferred()} {
			for _, term := range list {
				for k := range term.GetSegments() {
					if _, ok := m[k]; !ok {
						t.Fatalf("requirement sent upstream has key %q, which is no upstream key of %v", k, m)
					}
				}
			}
		}
		if err != nil {
			return
		}
		if len(answer) > 0 && d.Everywhere() && (c.NodeLocal() || !c.Upstream().Empty()) {
			t.Fatalf("accepted answer %v of a mapped connection (node-local: %v) is everywhere", answer, c.NodeLocal())
		}
		proxyKeys := answerKeys(c, entries, req.GetRequisite(), opts)
		for _, top := range d.Topologies() {
			for k, v := range top.GetSegments() {
				if !proxyKeys[k] {
					t.Fatalf("accepted answer %v has key %q, which is no map target, requisite key or declared label", top, k)
				}
				if p := labelValueProblem(v); p != "" {
					t.Fatalf("accepted answer has value %q for %q: %s", v, k, p)
				}
			}
			if len(req.GetRequisite()) > 0 && !slices.ContainsFunc(req.GetRequisite(), func(q *csi.Topology) bool { return agrees(q, top) }) {
				t.Fatalf("accepted answer %v lies outside the requisite %v", top, req.GetRequisite())
			}
		}
	})
}

// answerKeys is every key an accepted answer may carry: the map's
// targets, the keys of the requisite (which narrows), and the declared
// entries' requirement keys (with the prefix) and extra labels.
func answerKeys(c *Compiled, entries []Entry, requisite []*csi.Topology, opts Options) map[string]bool {
	keys := map[string]bool{}
	for _, to := range c.Upstream().toProxy {
		keys[to] = true
	}
	for _, q := range requisite {
		for k := range q.GetSegments() {
			keys[k] = true
		}
	}
	for _, e := range entries {
		for k := range e.Requirements {
			keys[labels.FullKey(opts.Prefix, k)] = true
		}
		for k := range e.Extra {
			keys[k] = true
		}
	}
	return keys
}

// agrees reports whether two topologies have the same value for every key
// both carry.
func agrees(a, b *csi.Topology) bool {
	for k, v := range a.GetSegments() {
		if w, ok := b.GetSegments()[k]; ok && w != v {
			return false
		}
	}
	return true
}
