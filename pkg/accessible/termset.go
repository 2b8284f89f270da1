package accessible

import (
	"maps"
	"slices"
	"strconv"
)

// termSet finds equal terms (equal segment maps) among those added, so
// that removing duplicates from n terms, or looking n terms up in another
// list, costs O(n): a request may carry one term per node of a large
// cluster (10,000 and more), and every retry pays again. A few terms are
// compared pairwise, which allocates nothing; once there are more than
// dedupePairwise, they are found through a map of canonical keys.
//
// The zero value is an empty set.
type termSet struct {
	terms []map[string]string
	// pos[i] is the position the caller gave terms[i].
	pos []int
	// index maps canonical(terms[i]) to i, once there are more than
	// dedupePairwise terms.
	index map[string]int
}

// dedupePairwise is the most terms a termSet compares pairwise.
const dedupePairwise = 8

// countStep, when set (by a test), is called for each pair of terms
// compared and each canonical key built: the work a termSet does.
var countStep func()

func step() {
	if countStep != nil {
		countStep()
	}
}

// find returns the position given to the first added term equal to t.
func (s *termSet) find(t map[string]string) (int, bool) {
	if s.index != nil {
		i, ok := s.index[canonical(t)]
		if !ok {
			return 0, false
		}
		return s.pos[i], true
	}
	for i, have := range s.terms {
		step()
		if maps.Equal(have, t) {
			return s.pos[i], true
		}
	}
	return 0, false
}

// add adds t at position pos unless an equal term was added; it reports
// whether t was new.
func (s *termSet) add(t map[string]string, pos int) bool {
	if s.index == nil && len(s.terms) < dedupePairwise {
		if _, dup := s.find(t); dup {
			return false
		}
		s.terms, s.pos = append(s.terms, t), append(s.pos, pos)
		return true
	}
	if s.index == nil {
		s.index = make(map[string]int, 2*dedupePairwise)
		for i, have := range s.terms {
			s.index[canonical(have)] = i
		}
	}
	k := canonical(t)
	if _, dup := s.index[k]; dup {
		return false
	}
	s.index[k] = len(s.terms)
	s.terms, s.pos = append(s.terms, t), append(s.pos, pos)
	return true
}

// canonical is a topology as a string with its keys sorted, each key and
// value preceded by its length (CSI strings may hold any byte, so no
// separator could tell "a\x00b"="c" from "a"="b\x00c"); equal topologies,
// and only they, give equal strings.
func canonical(t map[string]string) string {
	step()
	var buf [8]string
	keys, n := buf[:0], 0
	for k, v := range t {
		keys = append(keys, k)
		n += len(k) + len(v) + 2*(1+digits(len(k)))
	}
	slices.Sort(keys)
	b := make([]byte, 0, n)
	for _, k := range keys {
		b = strconv.AppendInt(b, int64(len(k)), 10)
		b = append(b, ':')
		b = append(b, k...)
		b = strconv.AppendInt(b, int64(len(t[k])), 10)
		b = append(b, ':')
		b = append(b, t[k]...)
	}
	return string(b)
}

// digits is the number of decimal digits of n (n >= 0), less one.
func digits(n int) int {
	d := 0
	for ; n >= 10; n /= 10 {
		d++
	}
	return d
}
