package nodetopology

import (
	"context"
	"log/slog"
)

// Log writes one line per rule of r, and one for the base segment, to
// log: a rule in error (a match timeout, a rendered value that is no label
// value, an unreadable file or label source) at warn, since the node then
// reports fewer segments than the admin wrote rules for and nothing else
// says so at the default level; a rule that matched, was skipped (no
// match, a missing source: SPEC §7) or was shadowed at debug. Every
// evaluation of the rules that a node reports from goes through it (serve
// at start-up and on every re-evaluation), so what is logged does not
// depend on where the rules ran.
func (r Result) Log(log *slog.Logger) {
	if r.Base != nil {
		logRule(log, *r.Base)
	}
	for _, rr := range r.Rules {
		logRule(log, rr)
	}
}

func logRule(log *slog.Logger, rr RuleResult) {
	level, msg := slog.LevelDebug, "node topology rule"
	if rr.Status == StatusError {
		level, msg = slog.LevelWarn, "node topology rule failed: the node does not report its key from this rule"
	}
	if !log.Enabled(context.Background(), level) {
		return
	}
	attrs := []slog.Attr{slog.Int("index", rr.Index), slog.String("key", rr.Key), slog.String("source", rr.Source), slog.String("status", rr.Status)}
	if rr.Index == BaseIndex {
		attrs[0] = slog.String("index", "base")
	}
	if rr.Status == StatusMatched {
		attrs = append(attrs, slog.String("value", rr.Value))
	} else {
		attrs = append(attrs, slog.String("reason", rr.Reason))
	}
	log.LogAttrs(context.Background(), level, msg, attrs...)
}
