package config

import (
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/democratic-csi/proxy-topology/pkg/clip"
)

// MaxDepth bounds how deeply a config file (the main config or a
// connection file) nests mappings and sequences. The deepest key either
// holds is about 6 levels (proxy.perDriver.topology[i].requirements.k);
// 64 leaves room for any driver's own sections. Deeper is refused before
// anything decodes the file into keys: koanf flattens the main config
// into one dotted path per level, so 9,999 levels (50 KB) cost 967 MB and
// seconds, and warned with a 20,000-character key.
const MaxDepth = 64

// checkDepth refuses a document that nests deeper than MaxDepth, naming
// where ("file <path>", "config <path>") and the line where the limit is passed. An alias counts as deep as
// its anchor (a decoder expands it); one to its own ancestor is left to
// the decoders, which refuse the cycle. The walk stops at the first node past the limit, and
// measures each node once, so it is linear in the document and bounded by
// what it accepts, however aliases share anchors.
func checkDepth(where string, doc *yaml.Node) error {
	d := depthCheck{height: map[*yaml.Node]int{}}
	if !d.within(doc, MaxDepth) {
		return fmt.Errorf("%s: line %d: nested deeper than %d levels, the limit for a config file", where, d.line, MaxDepth)
	}
	return nil
}

// depthCheck remembers the height of each node measured whole (a scalar
// is 0, a mapping of scalars 1); onPath marks the nodes being measured.
type depthCheck struct {
	height map[*yaml.Node]int
	onPath map[*yaml.Node]bool
	// line is where the limit was passed.
	line int
	// walked counts the nodes visited, for tests.
	walked int
}

// within reports whether n nests at most budget levels (the document and
// alias nodes take none); the first node past it sets line.
func (d *depthCheck) within(n *yaml.Node, budget int) bool {
	if n == nil {
		return true
	}
	if h, ok := d.height[n]; ok {
		if h > budget {
			d.line = n.Line
			return false
		}
		return true
	}
	if d.onPath[n] {
		// An alias to its own ancestor: the decoders refuse the cycle
		// with a message of their own (a shape error), which says more.
		return true
	}
	d.walked++
	if d.onPath == nil {
		d.onPath = map[*yaml.Node]bool{}
	}
	d.onPath[n] = true
	defer delete(d.onPath, n)
	var h int
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if !d.within(c, budget) {
				return false
			}
			h = max(h, d.height[c])
		}
	case yaml.AliasNode:
		if !d.within(n.Alias, budget) {
			d.line = n.Line // where the expansion passes the limit
			return false
		}
		h = d.height[n.Alias]
	case yaml.MappingNode, yaml.SequenceNode:
		if budget == 0 {
			d.line = n.Line
			return false
		}
		for _, c := range n.Content {
			if !d.within(c, budget-1) {
				return false
			}
			h = max(h, 1+d.height[c])
		}
	}
	d.height[n] = h
	return true
}

// maxShownKey bounds a key path in a message: 64 levels of short keys fit.
const maxShownKey = 256

// showKey is a key path as a message shows it: bare when plain, else
// quoted, and cut to maxShownKey bytes, so a warning stays one line.
func showKey(key string) string { return clip.PlainN(key, maxShownKey) }
