package nodetopology

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/labels"
	"github.com/dlclark/regexp2"
)

// MatchTimeout bounds each regex match: rules are written by admins in
// ECMAScript syntax, which backtracks, and a catastrophic pattern must fail
// a rule rather than hang NodeGetInfo. regexp2 checks its deadline on a
// coarse clock, so a timed-out match returns after up to about twice this.
const MatchTimeout = 100 * time.Millisecond

// Rule defaults filled in by Compile.
const (
	DefaultRegex    = "(.*)"
	DefaultTemplate = "{match:0}"
)

// configPath is where Config lives in the main config; every Compile error
// starts with a key path under it so the admin can find the offending line.
const configPath = "proxy.nodeTopology"

// FieldError is one problem found by Compile.
type FieldError struct {
	Path string // key path, e.g. proxy.nodeTopology.fromRegexp[2].regex
	Err  error
}

func (e *FieldError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// Evaluator is a compiled Config. It is immutable and safe for concurrent
// use.
type Evaluator struct {
	typ    string
	prefix string
	rules  []compiledRule
}

type compiledRule struct {
	rule Rule   // with defaults filled
	key  string // full key
	re   *regexp2.Regexp
	tmpl template
}

// Compile validates cfg and compiles every regex once. It reports every
// problem it finds (joined with errors.Join), each as a *FieldError.
func Compile(cfg Config) (*Evaluator, error) {
	var errs []error
	fail := func(path string, format string, args ...any) {
		errs = append(errs, &FieldError{Path: path, Err: fmt.Errorf(format, args...)})
	}

	e := &Evaluator{}
	switch cfg.Type {
	case "", TypeCluster:
		e.typ = TypeCluster
	case TypeNode:
		e.typ = TypeNode
	case TypeZone, TypeCustom:
		e.typ = TypeZone
	default:
		fail(configPath+".type", "%q is not one of %s, %s, %s, %s", cfg.Type, TypeCluster, TypeNode, TypeZone, TypeCustom)
	}

	e.prefix = cfg.Prefix
	if e.prefix == "" {
		e.prefix = DefaultPrefix
	}
	prefixOK := true
	if err := labels.PrefixError(e.prefix); err != nil {
		prefixOK = false
		fail(configPath+".prefix", "%q is not a valid label key prefix: %v", cfg.Prefix, err)
	}

	for i, r := range cfg.FromRegexp {
		path := fmt.Sprintf("%s.fromRegexp[%d]", configPath, i)
		cr, ruleErrs := compileRule(path, r, e.prefix, prefixOK)
		errs = append(errs, ruleErrs...)
		e.rules = append(e.rules, cr)
	}

	// Without a base segment and without rules the node can never report
	// topology; that is certain from the config alone, so say it at
	// start-up rather than at every NodeGetInfo.
	if e.typ == TypeZone && len(cfg.FromRegexp) == 0 {
		fail(configPath+".fromRegexp", "type %s has no base segment, so at least one rule is required", cfg.Type)
	}

	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return e, nil
}

var sourceNames = []string{SourceNodeName, SourceHostname, SourceEnv, SourceFile, SourceNodeLabel}

func compileRule(path string, r Rule, prefix string, prefixOK bool) (compiledRule, []error) {
	var errs []error
	fail := func(field string, format string, args ...any) {
		errs = append(errs, &FieldError{Path: path + "." + field, Err: fmt.Errorf(format, args...)})
	}

	if r.Regex == "" {
		r.Regex = DefaultRegex
	}
	if r.Template == "" {
		r.Template = DefaultTemplate
	}
	cr := compiledRule{rule: r, key: labels.FullKey(prefix, r.TopologyKey)}

	switch {
	case r.TopologyKey == "":
		fail("topologyKey", "required")
	case !strings.Contains(r.TopologyKey, "/") && !prefixOK:
		// The prefix error already explains this key.
	default:
		if err := labels.KeyError(cr.key); err != nil {
			if cr.key == r.TopologyKey {
				fail("topologyKey", "%q is not a valid label key (%v)", r.TopologyKey, err)
			} else {
				fail("topologyKey", "%q is not a valid label key once prefixed as %q (%v)", r.TopologyKey, cr.key, err)
			}
		}
	}

	// Each source reads exactly one of envName/file/label. A field set for
	// another source is almost always a typo or a half-edited rule, and
	// silently ignoring it would read the wrong value.
	fields := []struct {
		name, value, source string
	}{
		{"envName", r.EnvName, SourceEnv},
		{"file", r.File, SourceFile},
		{"label", r.Label, SourceNodeLabel},
	}
	switch {
	case r.Source == "":
		fail("source", "required (one of %s)", strings.Join(sourceNames, ", "))
	case !slices.Contains(sourceNames, r.Source):
		fail("source", "%q is not one of %s", r.Source, strings.Join(sourceNames, ", "))
	default:
		for _, f := range fields {
			if f.source == r.Source && f.value == "" {
				fail(f.name, "required for source %s", r.Source)
			}
			if f.source != r.Source && f.value != "" {
				fail(f.name, "only used by source %s, but source is %s", f.source, r.Source)
			}
		}
	}
	switch {
	case r.Source == SourceEnv && strings.ContainsAny(r.EnvName, "=\x00"):
		fail("envName", "%q is not a valid environment variable name", r.EnvName)
	case r.Source == SourceFile && r.File != "" && !filepath.IsAbs(r.File):
		fail("file", "%q is not an absolute path", r.File)
	case r.Source == SourceNodeLabel && r.Label != "":
		if err := labels.KeyError(r.Label); err != nil {
			fail("label", "%q is not a valid label key (%v)", r.Label, err)
		}
	}

	re, err := compileRegex(r.Regex)
	if err != nil {
		fail("regex", "%v", err)
		return cr, errs
	}
	cr.re = re
	tmpl, err := parseTemplate(r.Template, re)
	if err != nil {
		fail("template", "%v", err)
		return cr, errs
	}
	cr.tmpl = tmpl
	return cr, errs
}

// compileRegex anchors expr as ^(?:expr)$. expr is compiled on its own
// first: wrapping text is not a parse, and "a)|(b" would otherwise compile
// to ^(?:a)|(b)$, whose second branch is unanchored. A regex that is
// balanced on its own cannot escape the group.
func compileRegex(expr string) (*regexp2.Regexp, error) {
	if _, err := regexp2.Compile(expr, regexp2.ECMAScript); err != nil {
		return nil, err
	}
	re, err := regexp2.Compile("^(?:"+expr+")$", regexp2.ECMAScript)
	if err != nil {
		return nil, fmt.Errorf("cannot be anchored as ^(?:regex)$: %w", err)
	}
	re.MatchTimeout = MatchTimeout
	return re, nil
}

// Prefix returns the key prefix in effect (DefaultPrefix if none was set).
func (e *Evaluator) Prefix() string { return e.prefix }

// Type returns the normalized type: cluster, node or zone.
func (e *Evaluator) Type() string { return e.typ }

// Rules returns the rules as configured, with Regex and Template defaults
// filled in. The slice is a copy.
func (e *Evaluator) Rules() []Rule {
	out := make([]Rule, len(e.rules))
	for i, r := range e.rules {
		out[i] = r.rule
	}
	return out
}

// NeedsLabels reports whether any rule reads node labels, so that callers
// only ask the API server (and need RBAC for it) when the config uses them.
func (e *Evaluator) NeedsLabels() bool {
	return slices.ContainsFunc(e.rules, func(r compiledRule) bool { return r.rule.Source == SourceNodeLabel })
}

// EnvNames returns the env vars read by env rules, deduplicated, in rule
// order.
func (e *Evaluator) EnvNames() []string {
	return e.refs(SourceEnv, func(r Rule) string { return r.EnvName })
}

// FilePaths returns the files read by file rules, deduplicated, in rule
// order.
func (e *Evaluator) FilePaths() []string {
	return e.refs(SourceFile, func(r Rule) string { return r.File })
}

func (e *Evaluator) refs(source string, field func(Rule) string) []string {
	var out []string
	for _, r := range e.rules {
		if r.rule.Source == source && !slices.Contains(out, field(r.rule)) {
			out = append(out, field(r.rule))
		}
	}
	return out
}

// Accessibility returns the options accessibility matching needs from this
// node topology config: its key prefix and type. It is the one place they
// are built, so the node plugin and the controller match with what nodes
// report.
func (e *Evaluator) Accessibility() accessible.Options {
	return accessible.Options{Prefix: e.prefix, Type: e.typ}
}
