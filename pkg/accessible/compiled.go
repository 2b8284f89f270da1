package accessible

import (
	"cmp"
	"hash/maphash"
	"maps"
	"math/bits"
	"slices"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Compiled is a connection's topology list prepared once for the options:
// requirements with full keys, each entry's accessible topology, and which
// entries repeat another. A loaded connection keeps one, so a CreateVolume
// only matches terms against it; Decide compiles on every call.
//
// A Compiled is immutable and safe for concurrent use.
type Compiled struct {
	opts    Options
	entries []Entry
	norm    [][]segment
	// topo[i] is entry i's accessible topology: extra ∪ prefixed
	// requirements. Callers get copies.
	topo []map[string]string
	// first[i] is the first entry whose topology equals topo[i].
	first []int
	// empty reports an entry without any label: reachable everywhere.
	empty []bool
	all   Decision
}

// Compile prepares entries (which should have passed Validate) for opts.
func Compile(entries []Entry, opts Options) *Compiled {
	c := &Compiled{opts: opts, entries: entries, norm: normalize(entries, opts)}
	c.topo = make([]map[string]string, len(entries))
	c.first = make([]int, len(entries))
	c.empty = make([]bool, len(entries))
	// Equal topologies are found by an order-independent hash; maps.Equal
	// decides, so a collision costs time, never a wrongly merged entry.
	hashes := make([]uint64, len(entries))
	seed := maphash.MakeSeed()
	for i := range entries {
		segments := make(map[string]string, len(c.norm[i])+len(entries[i].Extra))
		maps.Copy(segments, entries[i].Extra)
		// Requirements last: they are what matching used, so on a clash
		// (which Validate rejects) they must be what the CO enforces.
		for _, s := range c.norm[i] {
			segments[s.key] = s.value
		}
		c.topo[i], c.first[i], c.empty[i] = segments, i, len(segments) == 0
		hashes[i] = segmentsHash(seed, segments)
		for j := range i {
			if hashes[j] == hashes[i] && maps.Equal(c.topo[j], segments) {
				c.first[i] = j
				break
			}
		}
	}
	order := make([]int, len(entries))
	for i := range order {
		order[i] = i
	}
	c.all = c.decision(order)
	return c
}

// Options returns the options c was compiled for.
func (c *Compiled) Options() Options { return c.opts }

// All is the accessible_topology of an existing volume: every entry,
// duplicates dropped; "everywhere" when there are no entries. Decorate.
func (c *Compiled) All() Decision { return c.all }

// matches reports whether a term matches an entry's normalized
// requirements: every key both mention has the same value. Keys only the
// term mentions do not restrict the entry, and keys only the entry mentions
// are not asked about.
//
// Keys are compared in full: entry keys are made full by normalize, and
// request keys are taken as sent, never stripped of a prefix. Comparing by
// short key (as SPEC §8's wording suggests) would let a foreign "b/zone"
// collide with our "a/zone". Extra labels are not requirements and take no
// part.
func matches(term *csi.Topology, reqs []segment) bool {
	segments := term.GetSegments()
	for _, s := range reqs {
		if v, ok := segments[s.key]; ok && v != s.value {
			return false
		}
	}
	return true
}

// firstMatch returns the index of the first term matching reqs, or
// len(terms).
func firstMatch(terms []*csi.Topology, reqs []segment) int {
	for i, t := range terms {
		if matches(t, reqs) {
			return i
		}
	}
	return len(terms)
}

// Admits reports whether the connection can serve a volume accessible from
// topology: some entry matches it as a term. A connection without a
// topology list, and an empty topology, are always admitted. GetCapacity
// uses it: a segment no entry admits has capacity 0.
func (c *Compiled) Admits(topology *csi.Topology) bool {
	if len(c.entries) == 0 || len(topology.GetSegments()) == 0 {
		return true
	}
	for _, reqs := range c.norm {
		if matches(topology, reqs) {
			return true
		}
	}
	return false
}

// Decide is the package's Decide for a compiled connection.
func (c *Compiled) Decide(connection string, requisite, preferred []*csi.Topology) (Decision, error) {
	if len(requisite) == 0 && len(preferred) == 0 {
		return c.all, nil
	}
	if len(c.entries) == 0 {
		// A connection without a topology list is reachable from every
		// node, so there is nothing to refuse.
		if c.opts.Type == typeNode {
			return Decision{pinned: pinToRequestedNode(requisite, preferred, c.opts)}, nil
		}
		return Decision{}, nil
	}

	// The CSI spec lets a CO send only preferred; without requisite the SP
	// may pick anywhere, but the proxy still has to pick among its entries,
	// and preferred is the only statement of where the CO wants the volume.
	terms, kind := requisite, "requisite"
	if len(terms) == 0 {
		terms, kind = preferred, "preferred"
	}
	type pick struct{ entry, rank int }
	var buf [8]pick
	picks := buf[:0]
	for i, reqs := range c.norm {
		// At least one term must match, not every term: the CSI spec asks
		// that the volume be accessible from at least one requisite
		// topology. The seed demanded every term, which failed for
		// Immediate classes under the external-provisioner's default
		// --immediate-topology=true (one requisite term per node).
		if kind == "requisite" && firstMatch(terms, reqs) == len(terms) {
			continue
		}
		// rank = index of the first preferred term the entry matches;
		// len(preferred) sorts entries matching none after the others.
		rank := firstMatch(preferred, reqs)
		if kind == "preferred" && rank == len(preferred) {
			continue
		}
		picks = append(picks, pick{entry: i, rank: rank})
	}
	if len(picks) == 0 {
		// RESOURCE_EXHAUSTED is the CSI spec's code for "unable to
		// provision in accessible topology", and on a WaitForFirstConsumer
		// claim the external-provisioner reacts to it by dropping the
		// selected node so the scheduler picks again. INVALID_ARGUMENT (the
		// seed's choice) is a final error there: the selected node stays and
		// the same node is retried forever.
		return Decision{}, status.Error(codes.ResourceExhausted, notAccessibleMessage(connection, kind, terms, c.norm))
	}
	// Stable, so entries with the same rank keep their order in T.
	slices.SortStableFunc(picks, func(a, b pick) int { return cmp.Compare(a.rank, b.rank) })
	order := make([]int, len(picks))
	for i, p := range picks {
		order[i] = p.entry
	}
	return c.decision(order), nil
}

// decision keeps the first of each set of equal topologies in order; an
// entry without labels makes the volume reachable everywhere.
func (c *Compiled) decision(order []int) Decision {
	if len(order) == 0 {
		return Decision{}
	}
	kept := order[:0]
	for _, i := range order {
		if c.empty[i] {
			// An entry without labels is reachable everywhere, and so is a
			// volume reachable from any one of its entries. An empty term
			// would instead be dropped by the provisioner when it builds
			// node affinity, silently narrowing it to the other entries.
			return Decision{}
		}
		if !slices.ContainsFunc(kept, func(k int) bool { return c.first[k] == c.first[i] }) {
			kept = append(kept, i)
		}
	}
	return Decision{c: c, order: kept}
}

// Decision is where a new or existing volume is accessible from: some of
// a connection's entries in preference order, one pinned node, or
// everywhere (no accessible_topology at all).
type Decision struct {
	c      *Compiled
	order  []int
	pinned *csi.Topology
}

// Everywhere reports a volume reachable from every node.
func (d Decision) Everywhere() bool { return len(d.order) == 0 && d.pinned == nil }

// Topologies returns the accessible_topology as new messages the caller
// may keep and change; nil means everywhere.
func (d Decision) Topologies() []*csi.Topology {
	if d.pinned != nil {
		return []*csi.Topology{{Segments: maps.Clone(d.pinned.Segments)}}
	}
	if len(d.order) == 0 {
		return nil
	}
	out := make([]*csi.Topology, len(d.order))
	backing := make([]csi.Topology, len(d.order))
	for i, e := range d.order {
		backing[i].Segments = maps.Clone(d.c.topo[e])
		out[i] = &backing[i]
	}
	return out
}

// segmentsHash is an order-independent hash of segments: a sum over pairs,
// each pair hashed so that swapping key and value changes it.
func segmentsHash(seed maphash.Seed, segments map[string]string) uint64 {
	var sum uint64
	for k, v := range segments {
		sum += bits.RotateLeft64(maphash.String(seed, k), 17)*0x9e3779b97f4a7c15 ^ maphash.String(seed, v)
	}
	return sum
}
