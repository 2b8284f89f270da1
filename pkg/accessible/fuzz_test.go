package accessible

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
)

// Small vocabularies make collisions — the interesting cases — frequent:
// short keys against their prefixed forms (under each prefix below), a/zone
// against b/zone, and few values. Byte 0xff switches to a raw string so odd
// input (empty keys, non-UTF-8, '/' in values) is exercised too.
var (
	fuzzKeys     = []string{"zone", "node", "region", pk("zone"), pk("node"), "a/zone", "b/zone", "topology.kubernetes.io/zone"}
	fuzzValues   = []string{"z1", "z2", "z3", "n1"}
	fuzzPrefixes = []string{testPrefix, "a", ""}
	fuzzTypes    = []string{"cluster", "node", "zone"}
)

// fuzzInput decodes fuzz bytes; when the bytes run out every read is 0.
type fuzzInput struct{ data []byte }

func (in *fuzzInput) byte() byte {
	if len(in.data) == 0 {
		return 0
	}
	b := in.data[0]
	in.data = in.data[1:]
	return b
}

func (in *fuzzInput) pick(vocab []string) string {
	b := in.byte()
	if b != 0xff {
		return vocab[int(b)%len(vocab)]
	}
	n := min(int(in.byte()%16), len(in.data))
	s := string(in.data[:n])
	in.data = in.data[n:]
	return s
}

func (in *fuzzInput) pairs(n int, keys []string) map[string]string {
	if n == 0 {
		return nil
	}
	m := make(map[string]string, n)
	for range n {
		k := in.pick(keys)
		m[k] = in.pick(fuzzValues)
	}
	return m
}

func (in *fuzzInput) terms() []*csi.Topology {
	n := int(in.byte() % 6)
	if n == 0 {
		return nil
	}
	terms := make([]*csi.Topology, n)
	for i := range terms {
		b := in.byte()
		if b == 0xfe {
			continue // a nil term
		}
		terms[i] = &csi.Topology{Segments: in.pairs(int(b%4), fuzzKeys)}
	}
	return terms
}

// decodeFuzz builds a Decide call from fuzz bytes; the layout is what the
// seed files under testdata/fuzz/FuzzDecide encode.
func decodeFuzz(data []byte) (*csi.TopologyRequirement, []Entry, Options) {
	in := &fuzzInput{data: data}
	opts := Options{
		Prefix: fuzzPrefixes[int(in.byte())%len(fuzzPrefixes)],
		Type:   fuzzTypes[int(in.byte())%len(fuzzTypes)],
	}
	hasReq := in.byte()%4 != 0
	entries := make([]Entry, in.byte()%6)
	for i := range entries {
		entries[i].Requirements = in.pairs(int(in.byte()%4), fuzzKeys)
		entries[i].Extra = in.pairs(int(in.byte()%3), fuzzKeys)
	}
	var req *csi.TopologyRequirement
	if hasReq {
		req = &csi.TopologyRequirement{Requisite: in.terms(), Preferred: in.terms()}
	}
	return req, entries, opts
}

func FuzzDecide(f *testing.F) {
	// Seeds live in testdata/fuzz/FuzzDecide (see TestFuzzSeedsDecode).
	f.Fuzz(func(t *testing.T, data []byte) {
		req, entries, opts := decodeFuzz(data)
		got, err := Decide("c1", req, entries, opts)
		decorated := Compile(entries, opts).All().Topologies()
		hasReq := len(req.GetRequisite()) > 0 || len(req.GetPreferred()) > 0

		if err != nil {
			if status.Code(err) == codes.InvalidArgument && (!wellFormed(req.GetRequisite()) || !wellFormed(req.GetPreferred())) {
				return // a term would narrow the result with a key or value that is no label
			}
			if code := status.Code(err); code != codes.ResourceExhausted {
				t.Fatalf("code = %v, want ResourceExhausted: %v", code, err)
			}
			if len(entries) == 0 || !hasReq {
				t.Fatalf("error without requirements or with an empty topology list: %v", err)
			}
			msg := status.Convert(err).Message()
			if !strings.Contains(msg, `for connection "c1" (it offers [`) || len(msg) > 4096 {
				t.Fatalf("bad message: %q", msg)
			}
			return
		}

		if len(entries) == 0 {
			nodeKey := opts.NodeKey()
			if !hasReq {
				if got != nil {
					t.Fatalf("empty topology list, no requirements: got %v, want nil", got)
				}
				return
			}
			// Type node pins to the node a term names, if any term names
			// one of ours.
			if opts.Type == TypeNode && len(got) == 1 && len(got[0].GetSegments()) == 1 && got[0].GetSegments()[nodeKey] != "" {
				return
			}
			// Otherwise the terms narrow the volume: each result is a
			// term without the node key, and no term is left out.
			terms := req.GetRequisite()
			if len(terms) == 0 {
				terms = req.GetPreferred()
			}
			for _, g := range got {
				if !slices.ContainsFunc(terms, func(term *csi.Topology) bool { return within(g, term, nodeKey) && within(term, g, nodeKey) }) {
					t.Fatalf("empty topology list: result %v is not one of the terms %v", g, terms)
				}
			}
			return
		}
		if !hasReq {
			if !sameTopologies(got, decorated) {
				t.Fatalf("no requirements: got %v, want All = %v", got, decorated)
			}
		}

		// Every result holds one entry's whole topology (narrowed by a
		// term, never widened), there are no duplicates, and no result
		// admits a node that no term admits: each agrees with some term on
		// every key of that term except the node key.
		terms := req.GetRequisite()
		if len(terms) == 0 {
			terms = req.GetPreferred()
		}
		for i, g := range got {
			// (A decorated list of nil is an entry without labels: everywhere.)
			if decorated != nil && !slices.ContainsFunc(decorated, func(d *csi.Topology) bool { return subset(d.GetSegments(), g.GetSegments()) }) {
				t.Fatalf("result %v holds no entry of the decorated list %v", g, decorated)
			}
			if containsTopology(got[:i], g) {
				t.Fatalf("duplicate %v in %v", g, got)
			}
			if hasReq && !slices.ContainsFunc(terms, func(term *csi.Topology) bool { return within(g, term, opts.NodeKey()) }) {
				t.Fatalf("result %v admits nodes that none of the terms %v admits", g, terms)
			}
		}
		if hasReq && got != nil && len(got) == 0 {
			t.Fatalf("success with an empty, non-nil accessible_topology")
		}

		// Validated lists and terms without empty keys or values give
		// well-formed segments (terms narrow the result with their own).
		if Validate(entries, opts) == nil && wellFormed(req.GetRequisite()) && wellFormed(req.GetPreferred()) {
			for _, g := range got {
				if len(g.GetSegments()) == 0 {
					t.Fatalf("empty topology in %v", got)
				}
				for k, v := range g.GetSegments() {
					if k == "" || v == "" {
						t.Fatalf("empty key or value in %v", got)
					}
				}
			}
		}

		// Admits is Decide with one term.
		for _, term := range req.GetRequisite() {
			_, err := Decide("c1", &csi.TopologyRequirement{Requisite: []*csi.Topology{term}}, entries, opts)
			if served := Compile(entries, opts).Admits(term); served != (err == nil) {
				t.Fatalf("Admits(%v) = %v, but Decide with that term alone: %v", term, served, err)
			}
		}
	})
}

// wellFormed reports terms whose segments are all valid labels.
func wellFormed(terms []*csi.Topology) bool {
	for _, t := range terms {
		for k, v := range t.GetSegments() {
			if labelKeyProblem(k) != "" || labelValueProblem(v) != "" {
				return false
			}
		}
	}
	return true
}

// subset reports whether every segment of a is in b.
func subset(a, b map[string]string) bool {
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// within reports whether result admits only nodes that term admits: it
// has every segment of term, the node key excepted.
func within(result, term *csi.Topology, nodeKey string) bool {
	for k, v := range term.GetSegments() {
		if k == nodeKey {
			continue
		}
		if w, ok := result.GetSegments()[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func containsTopology(list []*csi.Topology, t *csi.Topology) bool {
	for _, l := range list {
		if proto.Equal(l, t) {
			return true
		}
	}
	return false
}

func sameTopologies(a, b []*csi.Topology) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// TestFuzzSeedsDecode keeps the committed seed files meaningful: each is
// decoded and its shape checked, so a change to decodeFuzz that silently
// turns them into noise fails here.
func TestFuzzSeedsDecode(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		wantErr    bool
		want       []*csi.Topology // when no error
	}{
		{name: "strict mode zone not offered", file: "strict-zone-not-offered", wantErr: true},
		{name: "node type empty list", file: "node-type-empty-list", want: topos(topo(pk("node"), "n1"))},
		{name: "duplicates and extra", file: "duplicates-and-extra", want: topos(zoneTerm("z2"), topo(pk("zone"), "z1", "a/zone", "z2"))},
		{name: "prefix collisions", file: "prefix-collisions", want: topos(topo("a/zone", "z2", "b/zone", "z2"))},
		{name: "raw strings", file: "raw-strings", want: topos(topo("a/b", "", "xy", "z1"))},
		{name: "no requirements", file: "no-requirements", want: topos(zoneTerm("z1"), topo("topology.kubernetes.io/zone", "z3"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := readSeed(t, "testdata/fuzz/FuzzDecide/"+tc.file)
			req, entries, opts := decodeFuzz(data)
			got, err := Decide("c1", req, entries, opts)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Decide = %v, %v; want error %v", got, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("Decide (-want +got):\n%s", diff)
			}
		})
	}
}

// readSeed parses a one-value "go test fuzz v1" file holding []byte("…").
func readSeed(t *testing.T, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) != 2 || lines[0] != "go test fuzz v1" {
		t.Fatalf("%s: not a one-value go test fuzz v1 file", path)
	}
	quoted, ok := strings.CutPrefix(lines[1], "[]byte(")
	quoted, ok2 := strings.CutSuffix(quoted, ")")
	if !ok || !ok2 {
		t.Fatalf("%s: value is not []byte(…)", path)
	}
	s, err := strconv.Unquote(quoted)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return []byte(s)
}
