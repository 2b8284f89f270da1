package nodetopology

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"unicode"

	"github.com/democratic-csi/proxy-topology/pkg/clip"
	"github.com/democratic-csi/proxy-topology/pkg/labels"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// RuleResult statuses.
const (
	// StatusMatched: the rule set its key to Value.
	StatusMatched = "matched"
	// StatusSkipped: the source is missing, the regex did not match or the
	// rendered value is empty; the rule is ignored, as the seed specifies.
	StatusSkipped = "skipped"
	// StatusShadowed: an earlier rule or the base segment already set the key.
	StatusShadowed = "shadowed"
	// StatusError: the rule could have yielded a value but something is
	// wrong (unreadable file, label source failure, match timeout, invalid
	// rendered value); it yields nothing, and the reason says what to fix.
	StatusError = "error"
)

// BaseIndex is RuleResult.Index for the base segment of the type.
const BaseIndex = -1

// maxDisplay caps values copied into RuleResult.Input and reasons: a file
// may hold up to 64 KiB, which helps nobody in a log line or gRPC message.
const maxDisplay = 128

// Inputs is everything the rules can read; the evaluator does no I/O, so
// tests and callers decide where each value comes from.
type Inputs struct {
	NodeName string
	Hostname string
	// Env holds only variables that are set (a set but empty variable is
	// present with value "").
	Env map[string]string
	// Files is keyed by path as written in the rule; a path that is absent
	// was not read.
	Files map[string]FileInput
	// Labels is nil when no label source is configured.
	Labels map[string]string
	// LabelsErr is set when the label source failed; it takes precedence
	// over Labels.
	LabelsErr error
}

// FileInput is the result of reading one file.
type FileInput struct {
	// Content is raw; the evaluator trims trailing whitespace, because files
	// written by hand or by echo end with a newline.
	Content string
	// Err is set when the file could not be read. An error matching
	// fs.ErrNotExist skips the rule; any other error fails it.
	Err error
}

// Result is the outcome of Evaluate.
type Result struct {
	// Segments maps full key to value, base segment included. Never nil.
	Segments map[string]string
	// Base explains the segment added by the type (Index BaseIndex); nil for
	// type zone, which adds none.
	Base *RuleResult
	// Rules has one entry per rule, in order.
	Rules []RuleResult
}

// RuleResult explains what one rule did.
type RuleResult struct {
	Index int
	// Key is the full key.
	Key string
	// Source names the source with its argument, for display:
	// "nodeName", "hostname", "env ZONE", "file /etc/zone",
	// "nodeLabel topology.kubernetes.io/zone"; for the base segment
	// "type cluster" or "type node".
	Source string
	// Input is the value read, if any, shortened for display.
	Input string
	// Value is the rendered value when Status is StatusMatched.
	Value string
	// Status is one of StatusMatched, StatusSkipped, StatusShadowed,
	// StatusError.
	Status string
	// Reason explains any status other than StatusMatched.
	Reason string
}

func (rr RuleResult) String() string {
	name := "rule " + strconv.Itoa(rr.Index)
	if rr.Index == BaseIndex {
		name = "base segment"
	}
	s := fmt.Sprintf("%s (%s from %s): %s", name, rr.Key, rr.Source, rr.Status)
	if rr.Status == StatusMatched {
		return s + " " + strconv.Quote(rr.Value)
	}
	return s + ": " + rr.Reason
}

// Evaluate computes the node's segments from in. It never fails as a whole:
// each rule's problem is recorded in its RuleResult, and Result.Err decides
// whether the node can register at all.
func (e *Evaluator) Evaluate(in Inputs) Result {
	res := Result{
		Segments: map[string]string{},
		Rules:    make([]RuleResult, 0, len(e.rules)),
	}
	setBy := map[string]string{}

	if base := e.evaluateBase(in); base != nil {
		res.Base = base
		if base.Status == StatusMatched {
			res.Segments[base.Key] = base.Value
			setBy[base.Key] = "type " + e.typ
		}
	}

	for i, r := range e.rules {
		rr := RuleResult{Index: i, Key: r.key, Source: r.source()}
		if by, ok := setBy[r.key]; ok {
			rr.Status, rr.Reason = StatusShadowed, "key already set by "+by
		} else {
			r.evaluate(in, &rr)
		}
		if rr.Status == StatusMatched {
			res.Segments[rr.Key] = rr.Value
			setBy[rr.Key] = "rule " + strconv.Itoa(i)
		}
		res.Rules = append(res.Rules, rr)
	}
	return res
}

func (e *Evaluator) evaluateBase(in Inputs) *RuleResult {
	switch e.typ {
	case TypeCluster:
		return &RuleResult{
			Index: BaseIndex, Key: labels.FullKey(e.prefix, TypeCluster), Source: "type " + TypeCluster,
			Value: "local", Status: StatusMatched,
		}
	case TypeNode:
		rr := &RuleResult{
			Index: BaseIndex, Key: labels.FullKey(e.prefix, TypeNode), Source: "type " + TypeNode,
			Input: display(in.NodeName),
		}
		switch err := labels.ValueError(in.NodeName); {
		case in.NodeName == "":
			rr.Status, rr.Reason = StatusError, "node name is not known"
		case err != nil:
			rr.Status, rr.Reason = StatusError, fmt.Sprintf("node name %s is not a valid label value: %v", quote(in.NodeName), err)
		default:
			rr.Status, rr.Value = StatusMatched, in.NodeName
		}
		return rr
	}
	return nil
}

func (r compiledRule) source() string {
	switch r.rule.Source {
	case SourceEnv:
		return SourceEnv + " " + r.rule.EnvName
	case SourceFile:
		return SourceFile + " " + r.rule.File
	case SourceNodeLabel:
		return SourceNodeLabel + " " + r.rule.Label
	}
	return r.rule.Source
}

// evaluate fills rr for a rule whose key is not yet set.
func (r compiledRule) evaluate(in Inputs, rr *RuleResult) {
	input, status, reason := r.read(in)
	if status != "" {
		rr.Status, rr.Reason = status, reason
		return
	}
	rr.Input = display(input)

	m, err := r.re.FindStringMatch(input)
	if err != nil {
		rr.Status = StatusError
		if strings.HasPrefix(err.Error(), "match timeout") {
			// regexp2's message embeds the whole input; ours names the limit.
			rr.Reason = fmt.Sprintf("match timed out after %v", MatchTimeout)
		} else {
			rr.Reason = "match failed: " + err.Error()
		}
		return
	}
	if m == nil {
		rr.Status, rr.Reason = StatusSkipped, "regex did not match "+quote(input)
		return
	}

	value := r.tmpl.render(m)
	if value == "" {
		rr.Status, rr.Reason = StatusSkipped, "rendered value is empty"
		return
	}
	if err := labels.ValueError(value); err != nil {
		rr.Status, rr.Reason = StatusError, fmt.Sprintf("rendered value %s is not a valid label value: %v", quote(value), err)
		return
	}
	rr.Status, rr.Value = StatusMatched, value
}

// read returns the rule's input, or a non-empty status and reason when the
// source yields none.
func (r compiledRule) read(in Inputs) (input, status, reason string) {
	switch r.rule.Source {
	case SourceNodeName:
		if in.NodeName == "" {
			return "", StatusSkipped, "node name is not known"
		}
		return in.NodeName, "", ""
	case SourceHostname:
		if in.Hostname == "" {
			return "", StatusSkipped, "hostname is not known"
		}
		return in.Hostname, "", ""
	case SourceEnv:
		v, ok := in.Env[r.rule.EnvName]
		if !ok {
			return "", StatusSkipped, "env " + r.rule.EnvName + " is not set"
		}
		return v, "", ""
	case SourceFile:
		f, ok := in.Files[r.rule.File]
		switch {
		case !ok:
			return "", StatusSkipped, "file " + r.rule.File + " was not read"
		case errors.Is(f.Err, fs.ErrNotExist):
			return "", StatusSkipped, "file " + r.rule.File + " does not exist"
		case f.Err != nil:
			return "", StatusError, "cannot read file " + r.rule.File + ": " + f.Err.Error()
		}
		return strings.TrimRightFunc(f.Content, unicode.IsSpace), "", ""
	case SourceNodeLabel:
		switch {
		case in.LabelsErr != nil:
			return "", StatusError, "cannot read node labels: " + in.LabelsErr.Error()
		case in.Labels == nil:
			return "", StatusSkipped, "no label source configured"
		}
		v, ok := in.Labels[r.rule.Label]
		if !ok {
			return "", StatusSkipped, "label " + r.rule.Label + " not on node"
		}
		return v, "", ""
	}
	// Compile rejects unknown sources; this keeps a zero Evaluator honest.
	return "", StatusError, "unknown source " + strconv.Quote(r.rule.Source)
}

// Err returns nil when the node reports at least one segment. Otherwise the
// node is misconfigured: kubelet would register it without topology and the
// provisioner could never place volumes for it, so NodeGetInfo must fail
// loudly with FAILED_PRECONDITION, listing why every rule yielded nothing.
func (r Result) Err() error {
	if len(r.Segments) > 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("node reports no topology segment")
	if r.Base == nil {
		b.WriteString(" (type zone adds no base segment)")
	} else {
		b.WriteString("; " + r.Base.String())
	}
	if len(r.Rules) == 0 {
		b.WriteString("; no proxy.nodeTopology.fromRegexp rules are configured")
	}
	for _, rr := range r.Rules {
		b.WriteString("; " + rr.String())
	}
	return status.Error(codes.FailedPrecondition, b.String())
}

// display shortens s for RuleResult.Input without splitting a UTF-8
// sequence.
func display(s string) string {
	head, cut := clip.Head(s, maxDisplay)
	if !cut {
		return s
	}
	return head + "…"
}

// quote is strconv.Quote of the display form, so reasons stay one line.
func quote(s string) string {
	return strconv.Quote(display(s))
}
