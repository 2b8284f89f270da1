package accessible

import (
	"cmp"
	"hash/maphash"
	"maps"
	"math/bits"
	"slices"
	"sync"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/democratic-csi/proxy-topology/internal/protomap"
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

	wireOnce sync.Once
	wire     [][]byte // topo[i] encoded as a csi.Topology message
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

// Terms is a list of topology terms as a request carries them: decoded, or
// as the wire encoding of each csi.Topology message (the proxy's fast path,
// which never builds the maps). Wire terms must be valid encodings.
type Terms struct {
	Topologies []*csi.Topology
	Wire       [][]byte
}

// TermsOf wraps decoded terms.
func TermsOf(t []*csi.Topology) Terms { return Terms{Topologies: t} }

// Len is the number of terms.
func (t Terms) Len() int { return len(t.Topologies) + len(t.Wire) }

// value returns term i's value for key. Like a decoded map, a key sent
// twice has its last value.
func (t Terms) value(i int, key string) (string, bool) {
	if t.Topologies != nil {
		v, ok := t.Topologies[i].GetSegments()[key]
		return v, ok
	}
	v, ok := protomap.Lookup(t.Wire[i], 1, key) // segments
	return string(v), ok
}

// topologies returns the terms decoded, for messages.
func (t Terms) topologies() []*csi.Topology {
	if t.Topologies != nil || t.Wire == nil {
		return t.Topologies
	}
	out := make([]*csi.Topology, len(t.Wire))
	for i, b := range t.Wire {
		out[i] = &csi.Topology{}
		_ = proto.Unmarshal(b, out[i])
	}
	return out
}

// matches reports whether term i matches an entry's normalized
// requirements: every key both mention has the same value. Keys only the
// term mentions do not restrict the entry, and keys only the entry mentions
// are not asked about.
//
// Keys are compared in full: entry keys are made full by normalize, and
// request keys are taken as sent, never stripped of a prefix. Comparing by
// short key (as SPEC §8's wording suggests) would let a foreign "b/zone"
// collide with our "a/zone". Extra labels are not requirements and take no
// part.
func (t Terms) matches(i int, reqs []segment) bool {
	if t.Topologies != nil {
		term := t.Topologies[i].GetSegments()
		for _, s := range reqs {
			if v, ok := term[s.key]; ok && v != s.value {
				return false
			}
		}
		return true
	}
	for _, s := range reqs {
		// Compared as bytes: no string is made per lookup.
		if v, ok := protomap.Lookup(t.Wire[i], 1, s.key); ok && string(v) != s.value {
			return false
		}
	}
	return true
}

// firstMatch returns the first term matching reqs, or Len().
func (t Terms) firstMatch(reqs []segment) int {
	n := t.Len()
	for i := range n {
		if t.matches(i, reqs) {
			return i
		}
	}
	return n
}

// Decide is the package's Decide for a compiled connection.
func (c *Compiled) Decide(connection string, requisite, preferred Terms) (Decision, error) {
	if requisite.Len() == 0 && preferred.Len() == 0 {
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
	if terms.Len() == 0 {
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
		if kind == "requisite" && terms.firstMatch(reqs) == terms.Len() {
			continue
		}
		// rank = index of the first preferred term the entry matches;
		// Len() sorts entries matching none after the others.
		rank := preferred.firstMatch(reqs)
		if kind == "preferred" && rank == preferred.Len() {
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
		return Decision{}, status.Error(codes.ResourceExhausted, notAccessibleMessage(connection, kind, terms.topologies(), c.norm))
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

// AppendWire appends the accessible_topology to b as repeated field num of
// type csi.Topology, as a Volume carries it.
func (d Decision) AppendWire(b []byte, num protowire.Number) []byte {
	if d.pinned != nil {
		b = protowire.AppendTag(b, num, protowire.BytesType)
		return protowire.AppendBytes(b, encodeSegments(d.pinned.Segments))
	}
	if len(d.order) == 0 {
		return b
	}
	d.c.wireOnce.Do(func() {
		d.c.wire = make([][]byte, len(d.c.topo))
		for i, t := range d.c.topo {
			d.c.wire[i] = encodeSegments(t)
		}
	})
	for _, e := range d.order {
		b = protowire.AppendTag(b, num, protowire.BytesType)
		b = protowire.AppendBytes(b, d.c.wire[e])
	}
	return b
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

// encodeSegments encodes a csi.Topology with these segments, keys sorted as
// protobuf-go's deterministic encoding sorts them. It does not check UTF-8:
// validated entries are label keys and values, which are ASCII.
func encodeSegments(segments map[string]string) []byte {
	var b []byte
	for _, k := range slices.Sorted(maps.Keys(segments)) {
		b = protomap.AppendEntry(b, 1, k, segments[k])
	}
	return b
}
