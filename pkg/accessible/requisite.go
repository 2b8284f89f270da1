package accessible

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
)

// requisiteIndex finds the requisite terms an upstream's answer term
// matches (matches: every key both name has the same value) without
// comparing the term with each of them: an answer that names as many
// places as the request (an upstream echoing 10,000 terms) would
// otherwise cost the product of the two. Requisite terms are grouped by
// the keys they name (a CO sends one or a few such sets); for an answer
// term and a group, the keys they share select the matching terms
// through a map, built once per group and set of shared keys.
type requisiteIndex struct {
	terms  []*csi.Topology
	groups []requisiteGroup
	// byKeys maps a group's keys (keyList) to its index.
	byKeys map[string]int
	// views maps a group and the keys an answer term shares with it to
	// the group's terms by their values of those keys (valueList).
	views map[requisiteView]map[string][]int
}

// requisiteGroup is the requisite terms that name exactly keys (sorted).
type requisiteGroup struct {
	keys    []string
	members []int
}

type requisiteView struct {
	group  int
	shared string
}

func newRequisiteIndex(requisite []*csi.Topology) *requisiteIndex {
	x := &requisiteIndex{terms: requisite, byKeys: map[string]int{}, views: map[requisiteView]map[string][]int{}}
	last := -1
	for j, q := range requisite {
		// Terms mostly name the keys the one before named: no key list
		// is built for them.
		if last < 0 || !namesExactly(q.GetSegments(), x.groups[last].keys) {
			keys := slices.Sorted(maps.Keys(q.GetSegments()))
			sig := keyList(keys)
			g, ok := x.byKeys[sig]
			if !ok {
				g = len(x.groups)
				x.byKeys[sig] = g
				x.groups = append(x.groups, requisiteGroup{keys: keys})
			}
			last = g
		}
		x.groups[last].members = append(x.groups[last].members, j)
	}
	return x
}

// namesExactly reports whether segs has exactly the keys keys.
func namesExactly(segs map[string]string, keys []string) bool {
	if len(segs) != len(keys) {
		return false
	}
	for _, k := range keys {
		if _, ok := segs[k]; !ok {
			return false
		}
	}
	return true
}

// matching returns, in ascending order, the indexes of the requisite
// terms that term (its segments sorted by key) matches.
func (x *requisiteIndex) matching(term []segment) []int {
	var out []int
	groups := 0
	for g := range x.groups {
		shared, values := x.shared(g, term)
		var found []int
		if len(shared) == 0 {
			found = x.groups[g].members // no key in common: every term matches
		} else {
			found = x.view(g, shared)[valueList(values)]
		}
		if len(found) > 0 {
			groups++
			out = append(out, found...)
		}
		for range found {
			step()
		}
	}
	if groups > 1 {
		slices.Sort(out)
	}
	return out
}

// shared are the keys of group g that term names too, and term's values
// of them.
func (x *requisiteIndex) shared(g int, term []segment) (keys, values []string) {
	for _, k := range x.groups[g].keys {
		if i, ok := slices.BinarySearchFunc(term, k, func(s segment, k string) int { return strings.Compare(s.key, k) }); ok {
			keys, values = append(keys, k), append(values, term[i].value)
		}
	}
	return keys, values
}

// view is group g's terms by their values of the keys shared, built on
// first use.
func (x *requisiteIndex) view(g int, shared []string) map[string][]int {
	vk := requisiteView{g, keyList(shared)}
	if v, ok := x.views[vk]; ok {
		return v
	}
	v := map[string][]int{}
	values := make([]string, len(shared))
	for _, j := range x.groups[g].members {
		step()
		segs := x.terms[j].GetSegments()
		for i, k := range shared {
			values[i] = segs[k]
		}
		key := valueList(values)
		v[key] = append(v[key], j)
	}
	x.views[vk] = v
	return v
}

// keyList joins keys unambiguously, each preceded by its length: CSI
// strings may hold any byte.
func keyList(keys []string) string {
	var b []byte
	for _, s := range keys {
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(b, ':')
		b = append(b, s...)
	}
	return string(b)
}

// valueList is keyList for the values of one view's keys, whose number is
// fixed: one value needs no joining (and no copy).
func valueList(values []string) string {
	if len(values) == 1 {
		return values[0]
	}
	return keyList(values)
}
