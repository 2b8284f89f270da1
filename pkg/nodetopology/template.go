package nodetopology

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/dlclark/regexp2"
)

// templatePart is either literal text or a reference to a resolved group
// number; group references are resolved at Compile so that rendering can
// never fail on a missing group.
type templatePart struct {
	literal string
	group   int // -1 for literal text
}

type template []templatePart

const placeholderOpen = "{match:"

// parseTemplate splits tmpl into literal text and placeholders
// ({match:N}, ${match:N}, {match:name}, ${match:name}) and resolves each
// placeholder against re's groups.
func parseTemplate(tmpl string, re *regexp2.Regexp) (template, error) {
	var parts template
	addLiteral := func(s string) {
		if s == "" {
			return
		}
		if n := len(parts); n > 0 && parts[n-1].group < 0 {
			parts[n-1].literal += s
			return
		}
		parts = append(parts, templatePart{literal: s, group: -1})
	}
	rest := tmpl
	for {
		i := strings.Index(rest, placeholderOpen)
		if i < 0 {
			addLiteral(rest)
			return parts, nil
		}
		lit := rest[:i]
		dollar := strings.HasSuffix(lit, "$")
		if dollar {
			lit = lit[:len(lit)-1]
		}
		addLiteral(lit)
		after := rest[i+len(placeholderOpen):]
		end := strings.IndexByte(after, '}')
		if end < 0 {
			return nil, fmt.Errorf("unterminated %q (placeholders are {match:N}, ${match:N} or {match:name})", placeholderOpen)
		}
		ref := after[:end]
		written := placeholderOpen + ref + "}"
		if dollar {
			written = "$" + written
		}
		group, err := resolveGroup(ref, re)
		if err != nil {
			return nil, fmt.Errorf("%s but %w", written, err)
		}
		parts = append(parts, templatePart{group: group})
		rest = after[end+1:]
	}
}

// resolveGroup maps a placeholder reference to a group number. All-digit
// references are group numbers (regexp2 alone is inconsistent about "01"
// depending on whether the regex has named groups); anything else is a
// group name.
func resolveGroup(ref string, re *regexp2.Regexp) (int, error) {
	if ref == "" {
		return 0, fmt.Errorf("it names no group")
	}
	numbers := re.GetGroupNumbers()
	if isDigits(ref) {
		n, err := strconv.Atoi(ref)
		if err == nil && slices.Contains(numbers, n) {
			return n, nil
		}
		count := len(numbers) - 1 // group 0 is the whole match, not a group the user wrote
		noun := "groups"
		if count == 1 {
			noun = "group"
		}
		return 0, fmt.Errorf("the regex has %d %s", count, noun)
	}
	if n := re.GroupNumberFromName(ref); n >= 0 {
		return n, nil
	}
	return 0, fmt.Errorf("the regex has no group named %q", ref)
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// render renders the template against a successful match. A group that did
// not participate in the match renders as "", as in ECMAScript.
func (t template) render(m *regexp2.Match) string {
	var b strings.Builder
	for _, p := range t {
		if p.group < 0 {
			b.WriteString(p.literal)
			continue
		}
		g := m.GroupByNumber(p.group)
		if g == nil || len(g.Captures) == 0 {
			continue
		}
		b.WriteString(g.String())
	}
	return b.String()
}
