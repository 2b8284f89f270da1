package config

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/democratic-csi/proxy-topology/pkg/clip"
)

// Type errors of a config file are reported by what the file says — the
// YAML key, its line and the shape the key wants in YAML terms — rather
// than yaml.v3's "cannot unmarshal !!str into []accessible.Entry", which
// names Go types and no key.

var durationType = reflect.TypeOf(time.Duration(0))

// shapeErrors walks the document doc as a value of the Go type t (its
// fields named by their yaml tags) and returns one error per value whose
// YAML kind cannot decode into it: "<key>: line N: want <shape>; got
// <kind>". Unknown keys are not its business (unknownConnectionKeys). A
// scalar is quoted unless it is, or equals, a value under the key secret
// (e.g. "csi.secrets"), which messages never show.
func shapeErrors(doc *yaml.Node, t reflect.Type, secret string) []error {
	return shapeWalkOf(doc, t, secret, "yaml", false)
}

// mainShapeErrors is shapeErrors for the main config, whose fields are
// named by koanf tags and which koanf decodes weakly: a string that parses
// as the number or boolean wanted is fine.
func mainShapeErrors(data []byte) []error {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil {
		return nil
	}
	return shapeWalkOf(&doc, reflect.TypeOf(Main{}), "", "koanf", true)
}

func shapeWalkOf(doc *yaml.Node, t reflect.Type, secret, tag string, weak bool) []error {
	if doc == nil || doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil
	}
	w := shapeWalk{onPath: map[*yaml.Node]bool{}, secrets: map[string]bool{}, tag: tag, weak: weak}
	if secret != "" {
		n := doc.Content[0]
		for _, k := range strings.Split(secret, ".") {
			n = mappingValue(resolveAlias(n), k)
		}
		collectScalars(n, w.secrets, map[*yaml.Node]bool{})
	}
	w.walk("", doc.Content[0], t)
	// In the order of the file, as an admin reads it.
	sort.SliceStable(w.errs, func(i, j int) bool { return w.lines[i] < w.lines[j] })
	return w.errs
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

type shapeWalk struct {
	// tag names the struct tag that gives a field's key; weak accepts a
	// scalar that parses as the number or boolean wanted.
	tag  string
	weak bool
	// secrets are the scalar values never quoted.
	secrets map[string]bool
	// errs[i] is about line lines[i].
	errs  []error
	lines []int
	// onPath holds the nodes being walked, so an alias to an ancestor
	// ends the walk instead of looping.
	onPath map[*yaml.Node]bool
}

func (w *shapeWalk) walk(path string, n *yaml.Node, t reflect.Type) {
	line := n.Line
	n = resolveAlias(n)
	if n == nil || n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	if !w.fits(n, t) {
		w.fail(path, line, n, t)
		return
	}
	if w.onPath[n] {
		return
	}
	w.onPath[n] = true
	defer delete(w.onPath, n)
	switch t.Kind() {
	case reflect.Struct:
		pairs := mappingPairs(n)
		for i := range t.NumField() {
			f := t.Field(i)
			key, _, _ := strings.Cut(f.Tag.Get(w.tag), ",")
			if v, ok := pairs[key]; ok && key != "" && key != "-" {
				w.walk(join(path, key), v, f.Type)
			}
		}
	case reflect.Map:
		pairs := mappingPairs(n)
		for _, k := range slices.Sorted(maps.Keys(pairs)) {
			w.walk(fmt.Sprintf("%s[%q]", path, k), pairs[k], t.Elem())
		}
	case reflect.Slice:
		for i, item := range n.Content {
			w.walk(fmt.Sprintf("%s[%d]", path, i), item, t.Elem())
		}
	}
}

// fits reports whether the node n (not an alias, not null) has the shape
// of the Go type t, not looking inside it.
func (w *shapeWalk) fits(n *yaml.Node, t reflect.Type) bool {
	if t == durationType {
		if n.Kind != yaml.ScalarNode || n.Tag == "!!int" || n.Tag == "!!float" {
			return false
		}
		_, err := time.ParseDuration(n.Value)
		return err == nil
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return n.Kind == yaml.MappingNode
	case reflect.Slice:
		return n.Kind == yaml.SequenceNode
	case reflect.String:
		return n.Kind == yaml.ScalarNode
	case reflect.Bool:
		if w.weak && n.Kind == yaml.ScalarNode {
			_, err := strconv.ParseBool(n.Value)
			return err == nil
		}
		return n.Kind == yaml.ScalarNode && n.Tag == "!!bool"
	case reflect.Int, reflect.Int64, reflect.Int32:
		if w.weak && n.Kind == yaml.ScalarNode {
			_, err := strconv.ParseInt(n.Value, 0, 64)
			return err == nil
		}
		return n.Kind == yaml.ScalarNode && n.Tag == "!!int"
	}
	return true
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// fail records that n, at line, under path, is not of the shape of t.
func (w *shapeWalk) fail(path string, line int, n *yaml.Node, t reflect.Type) {
	where := path + ": "
	if path == "" {
		where = "the file: "
	}
	got := yamlKind(n)
	if n.Kind == yaml.ScalarNode && !w.secrets[n.Value] {
		got += fmt.Sprintf(" (%s)", displayScalar(n.Value))
	}
	w.lines = append(w.lines, line)
	w.errs = append(w.errs, fmt.Errorf("%sline %d: want %s; got %s", where, line, yamlShape(t, w.tag), got))
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
func yamlShape(t reflect.Type, tag string) string {
	if t == durationType {
		return "a duration with a unit, such as 30s or 2m"
	}
	switch t.Kind() {
	case reflect.Struct:
		var keys []string
		for i := range t.NumField() {
			if key, _, _ := strings.Cut(t.Field(i).Tag.Get(tag), ","); key != "" && key != "-" {
				keys = append(keys, key)
			}
		}
		return "a mapping with the keys " + strings.Join(keys, ", ")
	case reflect.Map:
		return "a mapping of names to " + strings.TrimPrefix(strings.TrimPrefix(yamlShape(t.Elem(), tag), "a "), "an ") + "s"
	case reflect.Slice:
		return "a list, each item " + yamlShape(t.Elem(), tag)
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "a whole number"
	}
	return t.Kind().String()
}
