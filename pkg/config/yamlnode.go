package config

import (
	"fmt"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/democratic-csi/proxy-topology/pkg/clip"
)

// Helpers over yaml.v3 nodes, which give decodeNode the line of every
// value and the keys as decoding sees them (aliases, merge keys).

// mappingValue returns the value node of key in a mapping (or in a
// document holding one), nil if there is none.
func mappingValue(n *yaml.Node, key string) *yaml.Node {
	if n != nil && n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// mappingPairs returns the keys of a mapping node with their values as
// decoding sees them: merge keys (<<: *defaults) contribute the keys of
// the mappings they name, and a key written in the mapping itself wins
// over a merged one.
func mappingPairs(n *yaml.Node) map[string]*yaml.Node {
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	var merged []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			merged = append(merged, v)
			continue
		}
		out[k.Value] = v
	}
	for _, v := range merged {
		if v = resolveAlias(v); v == nil {
			continue
		}
		sources := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			sources = v.Content
		}
		for _, m := range sources {
			if m = resolveAlias(m); m == nil || m.Kind != yaml.MappingNode {
				continue
			}
			for k, mv := range mappingPairs(m) {
				if _, own := out[k]; !own {
					out[k] = mv
				}
			}
		}
	}
	return out
}

// resolveAlias returns the node an alias (*name) stands for.
func resolveAlias(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// collectScalars adds the value of every scalar under n to values.
func collectScalars(n *yaml.Node, values map[string]bool, seen map[*yaml.Node]bool) {
	if n == nil || seen[n] {
		return
	}
	seen[n] = true
	if n.Kind == yaml.ScalarNode {
		values[n.Value] = true
	}
	if n.Kind == yaml.AliasNode {
		collectScalars(n.Alias, values, seen)
	}
	for _, c := range n.Content {
		collectScalars(c, values, seen)
	}
}

// emptyDocument reports whether n, decoded from a document after the first,
// holds nothing: a trailing "---" or only comments.
func emptyDocument(n *yaml.Node) bool {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	return n.Kind == 0 || n.Kind == yaml.ScalarNode && n.Tag == "!!null" && n.Value == ""
}

// displayScalar quotes a scalar for a message, cut to 40 bytes.
func displayScalar(v string) string {
	if head, cut := clip.Head(v, 40); cut {
		v = head + "…"
	}
	return fmt.Sprintf("%q", v)
}

// yamlKind names what a YAML node is.
func yamlKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.Tag {
	case "!!int", "!!float":
		return "a number"
	case "!!bool":
		return "true/false"
	}
	return "a string"
}

// yamlShape describes what a value of Go type t looks like in YAML.
func yamlShape(t reflect.Type) string {
	if t == durationType {
		return "a duration with a unit, such as 30s or 2m"
	}
	switch t.Kind() {
	case reflect.Struct:
		var keys []string
		for _, f := range schemaOf(t).fields {
			keys = append(keys, f.key)
		}
		return "a mapping with the keys " + strings.Join(keys, ", ")
	case reflect.Map:
		return "a mapping of names to " + strings.TrimPrefix(strings.TrimPrefix(yamlShape(t.Elem()), "a "), "an ") + "s"
	case reflect.Slice:
		return "a list, each item " + yamlShape(t.Elem())
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "a whole number"
	}
	return t.Kind().String()
}
