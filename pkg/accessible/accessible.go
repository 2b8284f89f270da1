package accessible

import (
	"cmp"
	"hash/maphash"
	"maps"
	"math/bits"
	"slices"
	"strings"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Options carries the proxy's node-topology settings that matching needs.
// The zero value matches with unprefixed short keys and cluster semantics.
type Options struct {
	// Prefix is joined with "/" to short requirement keys, e.g.
	// "org.democratic-csi.topology" turns "zone" into
	// "org.democratic-csi.topology/zone". Empty leaves short keys as they
	// are rather than producing an invalid "/zone".
	Prefix string
	// Type is the normalized node topology type: "cluster", "node" or
	// "zone". Only "node" changes behaviour (see Decide); any other value,
	// including "", behaves like "cluster".
	Type string
}

// typeNode is the node topology type under which a connection without a
// topology list is still pinned to the node that asked for it.
const typeNode = "node"

// nodeShortKey is the short key the node topology type reports a node under.
const nodeShortKey = "node"

// Decide implements SPEC §8 for connection `connection` (used in messages
// only). req may be nil. It returns the accessible_topology — nil means
// "reachable everywhere" and the CO sets no node affinity — or a gRPC status
// error with codes.ResourceExhausted.
//
// entries are expected to have passed Validate; Decide never panics on
// entries that did not, but then makes no promise about the well-formedness
// of what it returns.
func Decide(connection string, req *csi.TopologyRequirement, entries []Entry, opts Options) ([]*csi.Topology, error) {
	requisite, preferred := req.GetRequisite(), req.GetPreferred()
	if len(requisite) == 0 && len(preferred) == 0 {
		return Decorate(entries, opts), nil
	}
	if len(entries) == 0 {
		// A connection without a topology list is reachable from every
		// node, so there is nothing to refuse.
		if opts.Type == typeNode {
			return pinToRequestedNode(requisite, preferred, opts), nil
		}
		return nil, nil
	}

	// The CSI spec lets a CO send only preferred; without requisite the SP
	// may pick anywhere, but the proxy still has to pick among its entries,
	// and preferred is the only statement of where the CO wants the volume.
	terms, kind := requisite, "requisite"
	if len(terms) == 0 {
		terms, kind = preferred, "preferred"
	}

	norm := normalize(entries, opts)
	type pick struct{ entry, rank int }
	picks := make([]pick, 0, len(norm))
	for i, reqs := range norm {
		// At least one term must match, not every term: the CSI spec asks
		// that the volume be accessible from at least one requisite
		// topology. The seed demanded every term, which failed for
		// Immediate classes under the external-provisioner's default
		// --immediate-topology=true (one requisite term per node).
		if kind == "requisite" && !anyMatch(terms, reqs) {
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
		return nil, status.Error(codes.ResourceExhausted, notAccessibleMessage(connection, kind, terms, norm))
	}
	// Stable, so entries with the same rank keep their order in T.
	slices.SortStableFunc(picks, func(a, b pick) int { return cmp.Compare(a.rank, b.rank) })

	order := make([]int, len(picks))
	for i, p := range picks {
		order[i] = p.entry
	}
	return decorate(entries, norm, order), nil
}

// Serves reports whether the connection's entries can serve a single
// topology segment set. GetCapacity uses it: an accessible_topology that no
// entry satisfies gets capacity 0. Empty entries serve everything, and a
// nil or empty topology is served.
//
// It applies the same rule as Decide with the topology as the only term, but
// looks entry keys up instead of normalizing them, so a GetCapacity call per
// topology costs no allocations.
func Serves(topology *csi.Topology, entries []Entry, opts Options) bool {
	segments := topology.GetSegments()
	if len(entries) == 0 || len(segments) == 0 {
		return true
	}
	for i := range entries {
		if servesEntry(segments, &entries[i], opts.Prefix) {
			return true
		}
	}
	return false
}

// Decorate returns the accessible_topology for an existing volume: every
// entry as prefixed requirements ∪ extra, exact duplicates dropped (nil when
// entries is empty). ControllerGetVolume and ListVolumes use it, and Decide
// returns it when the request has no requirements.
func Decorate(entries []Entry, opts Options) []*csi.Topology {
	if len(entries) == 0 {
		return nil
	}
	order := make([]int, len(entries))
	for i := range order {
		order[i] = i
	}
	return decorate(entries, normalize(entries, opts), order)
}

// pinToRequestedNode handles a connection without a topology list under the
// node topology type: node-local storage is only reachable from the node
// that created it, which is the node the CO asked for.
func pinToRequestedNode(requisite, preferred []*csi.Topology, opts Options) []*csi.Topology {
	key := fullKey(opts.Prefix, nodeShortKey)
	// Preferred first: in strict and WaitForFirstConsumer modes it starts
	// with the selected node, while requisite is sorted by the provisioner.
	for _, list := range [2][]*csi.Topology{preferred, requisite} {
		for _, t := range list {
			// An empty value is not a node name (CSI segment values are
			// non-empty); keep looking.
			if v := t.GetSegments()[key]; v != "" {
				return []*csi.Topology{{Segments: map[string]string{key: v}}}
			}
		}
	}
	return nil
}

// segment is one key/value pair with a full key.
type segment struct{ key, value string }

// fullKey turns a requirement key into the label key the CO sees: short keys
// get the prefix, keys containing '/' are already full.
func fullKey(prefix, key string) string {
	if !needsPrefix(prefix, key) {
		return key
	}
	return prefix + "/" + key
}

// needsPrefix reports whether fullKey would change key, without building
// the full key.
func needsPrefix(prefix, key string) bool {
	return prefix != "" && !strings.Contains(key, "/")
}

// normalize returns each entry's requirements with full keys, sorted by key,
// one value per key. Computing full keys once per call keeps string
// building out of the terms × entries loop; all prefixed keys are cut from
// one string and all segments share one backing array, so the allocations
// per call do not grow with the number of entries.
//
// Validate rejects a short and a verbatim key that collide with different
// values; for entries that skipped it, the verbatim key wins, so the result
// does not depend on map iteration order.
func normalize(entries []Entry, opts Options) [][]segment {
	total, keyBytes := 0, 0
	for i := range entries {
		total += len(entries[i].Requirements)
		for k := range entries[i].Requirements {
			if needsPrefix(opts.Prefix, k) {
				keyBytes += len(opts.Prefix) + 1 + len(k)
			}
		}
	}
	backing := make([]segment, 0, total)
	// ends[i] is where backing[i]'s prefixed key ends in keys, or -1 when
	// its key is already full.
	ends := make([]int, 0, total)
	var keys strings.Builder
	keys.Grow(keyBytes)
	for i := range entries {
		for k, v := range entries[i].Requirements {
			end := -1
			if needsPrefix(opts.Prefix, k) {
				keys.WriteString(opts.Prefix)
				keys.WriteByte('/')
				keys.WriteString(k)
				end = keys.Len()
			}
			backing = append(backing, segment{k, v})
			ends = append(ends, end)
		}
	}
	all, start := keys.String(), 0
	for i, end := range ends {
		if end >= 0 {
			backing[i].key = all[start:end]
			start = end
		}
	}

	out := make([][]segment, len(entries))
	next := 0
	for i := range entries {
		n := len(entries[i].Requirements)
		reqs := backing[next : next+n : next+n]
		next += n
		if len(reqs) > 1 {
			slices.SortFunc(reqs, func(a, b segment) int { return strings.Compare(a.key, b.key) })
			reqs = dedupeKeys(reqs, entries[i].Requirements)
		}
		out[i] = reqs
	}
	return out
}

// dedupeKeys removes all but one segment per key from sorted reqs, keeping
// the value of the verbatim key.
func dedupeKeys(reqs []segment, raw map[string]string) []segment {
	w := 0
	for r := 0; r < len(reqs); r++ {
		if w > 0 && reqs[w-1].key == reqs[r].key {
			// Only a short and a verbatim key collide, and the verbatim
			// key is the full key itself.
			reqs[w-1].value = raw[reqs[r].key]
			continue
		}
		reqs[w] = reqs[r]
		w++
	}
	return reqs[:w]
}

// matches reports whether a term matches an entry's normalized requirements:
// every key both mention has the same value. Keys only the term mentions do
// not restrict the entry, and keys only the entry mentions are not asked
// about.
//
// Keys are compared in full: entry keys are made full by normalize, and
// request keys are taken as sent, never stripped of a prefix. Comparing by
// short key (as SPEC §8's wording suggests) would let a foreign "b/zone"
// collide with our "a/zone". Extra labels are not requirements and take no
// part.
func matches(term map[string]string, reqs []segment) bool {
	for _, s := range reqs {
		if v, ok := term[s.key]; ok && v != s.value {
			return false
		}
	}
	return true
}

func anyMatch(terms []*csi.Topology, reqs []segment) bool {
	return firstMatch(terms, reqs) < len(terms)
}

// firstMatch returns the index of the first term matching reqs, or
// len(terms) if none does.
func firstMatch(terms []*csi.Topology, reqs []segment) int {
	for i, t := range terms {
		if matches(t.GetSegments(), reqs) {
			return i
		}
	}
	return len(terms)
}

// servesEntry is matches for a raw entry, iterating the term's keys and
// finding the entry's requirement for each the way normalize would.
func servesEntry(term map[string]string, e *Entry, prefix string) bool {
	for k, v := range term {
		if have, ok := lookup(e.Requirements, k, prefix); ok && have != v {
			return false
		}
	}
	return true
}

// lookup finds the requirement whose full key is full. A verbatim key wins
// over a short key, as in normalize.
func lookup(reqs map[string]string, full, prefix string) (string, bool) {
	if strings.Contains(full, "/") {
		if v, ok := reqs[full]; ok {
			return v, true
		}
	}
	short, ok := shortKey(full, prefix)
	if !ok {
		return "", false
	}
	v, ok := reqs[short]
	return v, ok
}

// shortKey is the inverse of fullKey for short keys: the short key whose
// full key is full, if there can be one.
func shortKey(full, prefix string) (string, bool) {
	if prefix == "" {
		return full, !strings.Contains(full, "/")
	}
	rest, ok := strings.CutPrefix(full, prefix)
	if !ok {
		return "", false
	}
	rest, ok = strings.CutPrefix(rest, "/")
	if !ok || strings.Contains(rest, "/") {
		return "", false
	}
	return rest, true
}

// decorate builds the accessible_topology from the entries at the given
// indices, in that order: prefixed requirements ∪ extra, exact duplicates
// dropped.
func decorate(entries []Entry, norm [][]segment, order []int) []*csi.Topology {
	out := make([]*csi.Topology, 0, len(order))
	// One array for all results; callers only ever see pointers.
	backing := make([]csi.Topology, len(order))
	// seen maps a hash of each kept topology to its index in out. The hash
	// only narrows the search; maps.Equal decides, so a collision costs
	// time, never a wrongly dropped topology.
	var seen map[uint64]int
	var seed maphash.Seed
	if len(order) > 1 {
		seen = make(map[uint64]int, len(order))
		seed = maphash.MakeSeed()
	}
	for _, i := range order {
		segments := make(map[string]string, len(norm[i])+len(entries[i].Extra))
		for k, v := range entries[i].Extra {
			segments[k] = v
		}
		// Requirements last: they are what matching used, so on a clash
		// (which Validate rejects) they must be what the CO enforces.
		for _, s := range norm[i] {
			segments[s.key] = s.value
		}
		if len(segments) == 0 {
			// An entry without labels is reachable everywhere, and so is a
			// volume reachable from any one of its entries. An empty term
			// would instead be dropped by the provisioner when it builds
			// node affinity, silently narrowing it to the other entries.
			return nil
		}
		if seen != nil {
			h := segmentsHash(seed, segments)
			if j, ok := seen[h]; ok && (maps.Equal(out[j].Segments, segments) || containsSegments(out, segments)) {
				continue
			}
			seen[h] = len(out)
		}
		t := &backing[len(out)]
		t.Segments = segments
		out = append(out, t)
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

// containsSegments is the slow path after a hash collision between
// different topologies, which is rare enough for a linear scan.
func containsSegments(list []*csi.Topology, segments map[string]string) bool {
	for _, t := range list {
		if maps.Equal(t.Segments, segments) {
			return true
		}
	}
	return false
}
