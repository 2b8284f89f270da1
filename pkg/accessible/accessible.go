package accessible

import (
	"maps"
	"slices"
	"strings"

	csi "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/democratic-csi/proxy-topology/pkg/labels"
)

// Decide is Compile(entries, opts).Decide for one request; req may be nil.
// It returns the accessible_topology — nil means "reachable everywhere" and
// the CO sets no node affinity — or a gRPC status error with
// codes.ResourceExhausted.
func Decide(connection string, req *csi.TopologyRequirement, entries []Entry, opts Options) ([]*csi.Topology, error) {
	d, err := Compile(entries, opts).Decide(connection, req.GetRequisite(), req.GetPreferred())
	if err != nil {
		return nil, err
	}
	return d.Topologies(), nil
}

// segment is one key/value pair with a full key.
type segment struct{ key, value string }

// normalize returns each entry's requirements with full keys, sorted by key,
// one value per key. Validate rejects a short and a verbatim key that
// collide with different values; for entries that skipped it, the verbatim
// key wins, so the result does not depend on map iteration order.
func normalize(entries []Entry, opts Options) [][]segment {
	out := make([][]segment, len(entries))
	for i := range entries {
		full := map[string]string{}
		for k, v := range entries[i].Requirements {
			fk := labels.FullKey(opts.Prefix, k)
			if _, taken := full[fk]; taken && fk != k {
				continue // the verbatim key wins
			}
			full[fk] = v
		}
		reqs := make([]segment, 0, len(full))
		for _, k := range slices.Sorted(maps.Keys(full)) {
			reqs = append(reqs, segment{k, full[k]})
		}
		out[i] = reqs
	}
	return out
}

// constrains reports whether reqs (sorted by key) has a requirement for key.
func constrains(reqs []segment, key string) bool {
	_, found := slices.BinarySearchFunc(reqs, key, func(s segment, k string) int { return strings.Compare(s.key, k) })
	return found
}
