package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
)

// One decoding path for every config file (issue 37): the main config, a
// connection file and a group file are each read as follows.
//
//  1. yaml.v3 parses the file's first document into nodes, once; they give
//     the line of every value (checkDepth, the second-document rule and
//     the messages below use them).
//  2. decodeNode walks the nodes as the Go type the file decodes into,
//     whose keys (schemaOf) are read from its koanf tags once per type,
//     and sets the struct's fields as it goes. The one walk finds the
//     unknown keys, the values of the wrong shape (named by key and line,
//     in YAML terms: "want a whole number; got a list" rather than "cannot
//     unmarshal !!seq into int"), and fractions for whole numbers. A
//     string keeps the text the file wrote (0755 stays "0755").
//  3. For the main config, koanf lays the env overrides over the result
//     (applyEnv, LoadMain).
//
// Going through koanf's Load and Unmarshal instead doubled the cost of a
// connection file (koanf deep-copies the map, mapstructure decodes it
// again), and the controller parses thousands of them at start.

// schema is the shape of a Go type in a config file, read from its koanf
// tags.
type schema struct {
	t reflect.Type
	// fields are a struct's keys in declaration order; elem is a slice's
	// item or a map's value.
	fields []field
	elem   *schema
}

type field struct {
	key   string
	index int
	s     *schema
}

var schemas sync.Map // reflect.Type → *schema

// schemaOf returns the schema of t, built once per type.
func schemaOf(t reflect.Type) *schema {
	if s, ok := schemas.Load(t); ok {
		return s.(*schema)
	}
	s := &schema{t: t}
	switch t.Kind() {
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if key, _, _ := strings.Cut(f.Tag.Get("koanf"), ","); key != "" && key != "-" {
				s.fields = append(s.fields, field{key, i, schemaOf(f.Type)})
			}
		}
	case reflect.Slice, reflect.Map:
		s.elem = schemaOf(t.Elem())
	}
	actual, _ := schemas.LoadOrStore(t, s)
	return actual.(*schema)
}

func (s *schema) field(key string) *field {
	for i := range s.fields {
		if s.fields[i].key == key {
			return &s.fields[i]
		}
	}
	return nil
}

// scalars lists the dotted paths of the string, integer and boolean keys
// under s, the keys an env override can set.
func (s *schema) scalars(prefix string, out map[string]reflect.Kind) {
	for _, f := range s.fields {
		switch k := f.s.t.Kind(); k {
		case reflect.String, reflect.Int, reflect.Int64, reflect.Bool:
			out[prefix+f.key] = k
		case reflect.Struct:
			f.s.scalars(prefix+f.key+".", out)
		}
	}
}

var (
	durationType     = reflect.TypeOf(time.Duration(0))
	capabilitiesType = reflect.TypeOf(Capabilities{})
)

// decodeRules say how a kind of file is read.
type decodeRules struct {
	// weak reads a scalar as the number or boolean wanted when it parses
	// as one ("5", "true"), and a scalar as a one-item list, as koanf
	// decodes the main config.
	weak bool
	// leaves names each leaf of an unknown section (metrics.http.port),
	// as koanf lists keys; otherwise the unknown key itself.
	leaves bool
	// secret is the path of a section whose values messages never show.
	secret string
}

// decoded is what decodeNode found in a document.
type decoded struct {
	// yamlErr is what yaml.v3 itself refuses (a duplicate key, a value
	// its tag does not fit, an alias to its own ancestor).
	yamlErr error
	// shape lists values of the wrong shape, in the order of the file.
	shape []keyError
	// values lists values of the right shape that mean nothing (a
	// fraction for a whole number, proxy.capabilities: all).
	values []keyError
	// unknown lists the unknown keys, by parent path and key.
	unknown []unknownKey
}

type unknownKey struct{ parent, key string }

// keyError is a problem with the value of key, on line.
type keyError struct {
	line int
	key  string
	err  error
}

// shapeErrors and valueErrors leave out the keys an env override set
// (fromEnv): the file's value is not used.
func (d *decoded) shapeErrors(fromEnv map[string]string) []error { return keyErrors(d.shape, fromEnv) }
func (d *decoded) valueErrors(fromEnv map[string]string) []error { return keyErrors(d.values, fromEnv) }

func keyErrors(list []keyError, fromEnv map[string]string) []error {
	var out []error
	for _, e := range list {
		if _, set := fromEnv[e.key]; !set {
			out = append(out, e.err)
		}
	}
	return out
}

func (d *decoded) yamlErrors() []error {
	if d.yamlErr == nil {
		return nil
	}
	return []error{d.yamlErr}
}

func (u unknownKey) path() string { return join(u.parent, u.key) }

// decodeNode walks doc (a document node, or the zero node of an empty
// file) into out, a pointer to the struct the file decodes into. What out
// holds is meant only when decoded reports no problem.
func decodeNode(doc *yaml.Node, out any, rules decodeRules) *decoded {
	v := reflect.ValueOf(out).Elem()
	w := walker{decodeRules: rules, out: &decoded{}}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return w.out
	}
	root := doc.Content[0]
	if rules.secret != "" {
		w.secrets = map[string]bool{}
		n := root
		for _, k := range strings.Split(rules.secret, ".") {
			n = mappingValue(resolveAlias(n), k)
		}
		collectScalars(n, w.secrets, map[*yaml.Node]bool{})
	}
	// A document expands its aliases at most this much, as yaml.v3 bounds
	// it: a billion laughs must not be walked.
	w.budget = 4*countNodes(root) + 10000
	w.walk("", root, schemaOf(v.Type()), v)
	if len(w.terrors) > 0 && w.out.yamlErr == nil {
		w.out.yamlErr = &yaml.TypeError{Errors: w.terrors}
	}
	// In the order of the file, as an admin reads it.
	slices.SortStableFunc(w.out.shape, func(a, b keyError) int { return a.line - b.line })
	return w.out
}

// countNodes counts the nodes under n as written (an alias is one).
func countNodes(n *yaml.Node) int {
	c := 1
	for _, x := range n.Content {
		c += countNodes(x)
	}
	return c
}

type walker struct {
	decodeRules
	out *decoded
	// secrets are the scalar values never quoted.
	secrets map[string]bool
	terrors []string
	// onPath holds the mappings and lists being walked, so an alias to
	// an ancestor ends the walk instead of looping; budget bounds the
	// nodes walked.
	onPath []*yaml.Node
	budget int
}

// walk sets v (of s's type) to the value of n, and leaves it as it is for
// a null or a value of the wrong shape (recorded).
func (w *walker) walk(path string, n *yaml.Node, s *schema, v reflect.Value) {
	line, alias := n.Line, n.Kind == yaml.AliasNode
	n = resolveAlias(n)
	if n == nil || n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	if w.budget--; w.budget < 0 {
		w.out.yamlErr = errors.New("yaml: document contains excessive aliasing")
		return
	}
	switch t := s.t; {
	case n.Kind == yaml.MappingNode && (t.Kind() == reflect.Struct || t.Kind() == reflect.Map),
		n.Kind == yaml.SequenceNode && t.Kind() == reflect.Slice:
		if alias && slices.Contains(w.onPath, n) {
			// An alias to its own ancestor, of the right shape: the
			// walk stops there.
			return
		}
		w.onPath = append(w.onPath, n)
		defer func() { w.onPath = w.onPath[:len(w.onPath)-1] }()
		if n.Kind == yaml.MappingNode {
			w.mapping(path, n, s, v)
			return
		}
		v.Set(reflect.MakeSlice(t, len(n.Content), len(n.Content)))
		for i, item := range n.Content {
			w.walk(path+"["+strconv.Itoa(i)+"]", item, s.elem, v.Index(i))
		}
		return
	case n.Kind == yaml.ScalarNode && t == capabilitiesType && n.Tag == "!!str":
		// proxy.capabilities: auto is the empty section.
		if n.Value != CapabilitiesAuto && n.Value != "" {
			w.out.values = append(w.out.values, keyError{n.Line, path, fmt.Errorf("%s: %q: want %s, or a section with controller, node and volumeExpansion", path, n.Value, CapabilitiesAuto)})
		}
		return
	case n.Kind == yaml.ScalarNode && t.Kind() == reflect.Slice && w.weak:
		// koanf's weak decoding: a scalar is a one-item list.
		item := reflect.New(t.Elem()).Elem()
		if w.scalar(path, n, item) {
			v.Set(reflect.Append(reflect.MakeSlice(t, 0, 1), item))
			return
		}
	case n.Kind == yaml.ScalarNode:
		if w.scalar(path, n, v) {
			return
		}
	}
	w.fail(path, line, n, s.t)
}

// mapping walks a mapping into a struct (its known keys) or a map (any
// key).
func (w *walker) mapping(path string, n *yaml.Node, s *schema, v reflect.Value) {
	w.duplicates(n)
	var buf [16]pair
	pairs := sortedPairs(n, buf[:0])
	isMap := s.t.Kind() == reflect.Map
	if isMap && v.IsNil() {
		v.Set(reflect.MakeMapWithSize(s.t, len(pairs)))
	}
	for _, p := range pairs {
		if isMap {
			// A null value is the zero value, as yaml.v3 decodes it.
			x := reflect.New(s.t.Elem()).Elem()
			w.walk(path+"["+strconv.Quote(p.key)+"]", p.value, s.elem, x)
			v.SetMapIndex(reflect.ValueOf(p.key).Convert(s.t.Key()), x)
			continue
		}
		f := s.field(p.key)
		if f == nil {
			w.unknownKey(path, p.key, p.value)
			continue
		}
		w.walk(join(path, p.key), p.value, f.s, v.Field(f.index))
	}
}

type pair struct {
	key   string
	value *yaml.Node
}

// sortedPairs appends the pairs of the mapping n to out as decoding sees
// them (mappingPairs), sorted by key.
func sortedPairs(n *yaml.Node, out []pair) []pair {
	merged := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			merged = true
			break
		}
	}
	if merged {
		for k, v := range mappingPairs(n) {
			out = append(out, pair{k, v})
		}
	} else {
		for i := 0; i+1 < len(n.Content); i += 2 {
			out = append(out, pair{n.Content[i].Value, n.Content[i+1]})
		}
	}
	slices.SortStableFunc(out, func(a, b pair) int { return strings.Compare(a.key, b.key) })
	return out
}

// unknownKey records the key k under path, or each leaf under it.
func (w *walker) unknownKey(path, k string, v *yaml.Node) {
	v = resolveAlias(v)
	if !w.leaves || v == nil || v.Kind != yaml.MappingNode || len(v.Content) == 0 {
		w.out.unknown = append(w.out.unknown, unknownKey{path, k})
		return
	}
	if w.budget--; w.budget < 0 {
		w.out.yamlErr = errors.New("yaml: document contains excessive aliasing")
		return
	}
	if slices.Contains(w.onPath, v) {
		w.out.yamlErr = fmt.Errorf("yaml: anchor '%s' value contains itself", v.Anchor)
		return
	}
	w.onPath = append(w.onPath, v)
	defer func() { w.onPath = w.onPath[:len(w.onPath)-1] }()
	w.duplicates(v)
	for _, p := range sortedPairs(v, nil) {
		w.unknownKey(join(path, k), p.key, p.value)
	}
}

// duplicates records a key written twice in the mapping n, or one that is
// not a scalar, as yaml.v3 refuses them.
func (w *walker) duplicates(n *yaml.Node) {
	c := n.Content
	for i := 0; i < len(c); i += 2 {
		if k := c[i]; k.Kind == yaml.MappingNode || k.Kind == yaml.SequenceNode {
			w.terrors = append(w.terrors, fmt.Sprintf("line %d: cannot unmarshal %s into string", k.Line, k.Tag))
		}
	}
	if len(c) > 64 {
		// Past a few keys, by value: yaml.v3's pairwise check would cost
		// the square of the mapping.
		first := map[string]*yaml.Node{}
		for i := 0; i+1 < len(c); i += 2 {
			id := strconv.Itoa(int(c[i].Kind)) + ":" + c[i].Value
			if a, dup := first[id]; dup {
				w.terrors = append(w.terrors, fmt.Sprintf("line %d: mapping key %#v already defined at line %d", c[i].Line, c[i].Value, a.Line))
			} else {
				first[id] = c[i]
			}
		}
		return
	}
	for i := 0; i < len(c); i += 2 {
		for j := i + 2; j < len(c); j += 2 {
			if a, b := c[i], c[j]; a.Kind == b.Kind && a.Value == b.Value {
				w.terrors = append(w.terrors, fmt.Sprintf("line %d: mapping key %#v already defined at line %d", b.Line, b.Value, a.Line))
			}
		}
	}
}

// scalar sets v to the scalar n, false if n is not a value of v's type.
func (w *walker) scalar(path string, n *yaml.Node, v reflect.Value) bool {
	t := v.Type()
	if n.Style&yaml.TaggedStyle != 0 && t.Kind() == reflect.String {
		// An explicit tag (!!int x, !!binary …): yaml.v3 says what it means.
		var s string
		if err := n.Decode(&s); err != nil {
			var te *yaml.TypeError
			if errors.As(err, &te) {
				w.terrors = append(w.terrors, te.Errors...)
			} else if w.out.yamlErr == nil {
				w.out.yamlErr = err
			}
			return true
		}
		v.SetString(s)
		return true
	}
	switch {
	case t == durationType:
		if n.Tag == "!!int" || n.Tag == "!!float" {
			return false
		}
		d, err := time.ParseDuration(n.Value)
		v.SetInt(int64(d))
		return err == nil
	case t.Kind() == reflect.String:
		v.SetString(n.Value)
		return true
	case t.Kind() == reflect.Bool:
		if n.Tag != "!!bool" && !w.weak {
			// yaml.v3 reads YAML 1.1's yes, on, n … into a bool.
			b, ok := yaml11Bools[n.Value]
			v.SetBool(b)
			return ok && n.Tag == "!!str"
		}
		b, err := strconv.ParseBool(n.Value)
		v.SetBool(b)
		return err == nil
	case isInt(t.Kind()):
		if n.Tag == "!!float" && w.weak {
			// koanf reads 5.0 as 5; a fraction would be truncated, and
			// cacheTimeoutMinutes: 0.5 turn the cache off.
			f, err := strconv.ParseFloat(n.Value, 64)
			if err == nil && f != math.Trunc(f) {
				w.out.values = append(w.out.values, keyError{n.Line, path, fmt.Errorf("%s: %v is not a whole number", path, f)})
				return true
			}
			v.SetInt(int64(f))
			return err == nil
		}
		if n.Tag != "!!int" && !w.weak {
			return false
		}
		i, err := strconv.ParseInt(n.Value, 0, 64)
		if err != nil && n.Tag == "!!int" {
			err = n.Decode(&i) // 0o17, 1_000: yaml.v3's own forms
		}
		if err != nil || v.OverflowInt(i) {
			return false
		}
		v.SetInt(i)
		return true
	}
	return false
}

var yaml11Bools = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true, "on": true, "On": true, "ON": true,
	"n": false, "N": false, "no": false, "No": false, "NO": false, "off": false, "Off": false, "OFF": false,
}

func isInt(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return true
	}
	return false
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// fail records that n, at line, under path, is not of the shape of t:
// "<key>: line N: want <shape>; got <kind>". A scalar is quoted unless it
// is a secret.
func (w *walker) fail(path string, line int, n *yaml.Node, t reflect.Type) {
	where := path + ": "
	if path == "" {
		where = "the file: "
	}
	got := yamlKind(n)
	if n.Kind == yaml.ScalarNode && !w.secrets[n.Value] {
		got += fmt.Sprintf(" (%s)", displayScalar(n.Value))
	}
	w.out.shape = append(w.out.shape, keyError{line, path, fmt.Errorf("%sline %d: want %s; got %s", where, line, yamlShape(t), got)})
}

// firstErrors returns the first group that holds an error, joined.
func firstErrors(groups ...[]error) error {
	for _, g := range groups {
		if len(g) > 0 {
			return errors.Join(g...)
		}
	}
	return nil
}

// unknownProxyKey is the reason given for an unknown key under proxy:, in
// the main config and in connection files.
const unknownProxyKey = "unknown key under proxy: (a misspelt key there would silently change what the proxy does, so it is an error, not a warning)"

// unknownKeys sorts the unknown keys of a main config or a connection
// file (where names the file): those under proxy: are errors (a misspelt
// topology would make a connection reachable everywhere), the others
// warnings.
func (d *decoded) unknownKeys(where string) (warnings []string, errs []error) {
	for _, u := range d.unknown {
		p := u.path()
		if p == "proxy" || strings.HasPrefix(p, "proxy.") {
			errs = append(errs, fmt.Errorf("%s: %s", showKey(p), unknownProxyKey))
		} else {
			warnings = append(warnings, fmt.Sprintf("%s: unknown key %s (ignored)", where, showKey(p)))
		}
	}
	return warnings, errs
}
