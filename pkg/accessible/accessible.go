package accessible

import (
	"slices"
	"strings"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
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
	d, err := Compile(entries, opts).Decide(connection, req.GetRequisite(), req.GetPreferred())
	if err != nil {
		return nil, err
	}
	return d.Topologies(), nil
}

// Decorate returns the accessible_topology for an existing volume: every
// entry as prefixed requirements ∪ extra, exact duplicates dropped (nil when
// entries is empty). ControllerGetVolume and ListVolumes use it, and Decide
// returns it when the request has no requirements.
func Decorate(entries []Entry, opts Options) []*csi.Topology {
	if len(entries) == 0 {
		return nil
	}
	return Compile(entries, opts).All().Topologies()
}

// pinToRequestedNode handles a connection without a topology list under the
// node topology type: node-local storage is only reachable from the node
// that created it, which is the node the CO asked for.
func pinToRequestedNode(requisite, preferred []*csi.Topology, opts Options) *csi.Topology {
	key := fullKey(opts.Prefix, nodeShortKey)
	// Preferred first: in strict and WaitForFirstConsumer modes it starts
	// with the selected node, while requisite is sorted by the provisioner.
	for _, list := range [2][]*csi.Topology{preferred, requisite} {
		for _, term := range list {
			// An empty value is not a node name (CSI segment values are
			// non-empty); keep looking.
			if v := term.GetSegments()[key]; v != "" {
				return &csi.Topology{Segments: map[string]string{key: v}}
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
