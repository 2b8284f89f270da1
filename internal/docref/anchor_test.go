package docref

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

var (
	// anchorLink is a link to a heading: [text](file.md#anchor) or, in the
	// same file, [text](#anchor).
	anchorLink = regexp.MustCompile(`\]\(([^)#:\s]*\.md)?#([^)\s]+)\)`)
	// heading is an ATX heading line.
	heading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	// inlineLink is [text](target) inside a heading, which keeps its text.
	inlineLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// slugs are the anchors GitHub makes for doc's headings: the heading's
// text (a link's text, no markup) lowercased, spaces turned into '-',
// every other character that is neither a letter, a digit, '-' nor '_'
// dropped; a repeated slug gets -1, -2… Lines inside fenced code blocks
// are no headings.
func slugs(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fence := ""
	for _, line := range strings.Split(doc, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if f := fenceOf(trimmed); f != "" {
			switch {
			case fence == "":
				fence = f
			case strings.HasPrefix(trimmed, fence) && strings.TrimSpace(strings.TrimLeft(trimmed, fence[:1])) == "":
				fence = ""
			}
			continue
		}
		if fence != "" || len(line)-len(trimmed) > 3 {
			continue
		}
		m := heading.FindStringSubmatch(trimmed)
		if m == nil {
			continue
		}
		s := slug(inlineLink.ReplaceAllString(m[1], "$1"))
		if n := seen[s]; n > 0 {
			seen[s]++
			s = s + "-" + itoa(n)
		} else {
			seen[s] = 1
		}
		out[s] = true
	}
	return out
}

// fenceOf is the fence a line opens or closes (``` or ~~~, three or
// more), "" for any other line.
func fenceOf(line string) string {
	for _, c := range []string{"`", "~"} {
		n := len(line) - len(strings.TrimLeft(line, c))
		if n >= 3 {
			return strings.Repeat(c, n)
		}
	}
	return ""
}

func slug(text string) string {
	var sb strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			sb.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			sb.WriteRune(r)
		}
	}
	return sb.String()
}

func itoa(n int) string { return strconv.Itoa(n) }

// brokenAnchors lists the links of doc (at path) to a heading that does
// not exist; read returns another Markdown file's text by path.
func brokenAnchors(path, doc string, read func(string) (string, error)) []string {
	var out []string
	for _, m := range anchorLink.FindAllStringSubmatch(doc, -1) {
		target, text := path, doc
		if m[1] != "" {
			target = filepath.Join(filepath.Dir(path), m[1])
			var err error
			if text, err = read(target); err != nil {
				continue // TestLinksExist reports a missing file
			}
		}
		if !slugs(text)[m[2]] {
			out = append(out, m[0][2:len(m[0])-1]+" (no such heading in "+filepath.Base(target)+")")
		}
	}
	return out
}

// TestAnchorsExist: every link of README.md and docs/*.md to a heading
// (file.md#anchor, #anchor) names a heading that exists, by GitHub's
// anchor rules, so a renamed or removed section leaves no dead link.
func TestAnchorsExist(t *testing.T) {
	read := func(p string) (string, error) {
		b, err := os.ReadFile(p)
		return string(b), err
	}
	checked := 0
	for _, doc := range docs(t) {
		text, err := read(doc)
		if err != nil {
			t.Fatal(err)
		}
		checked += len(anchorLink.FindAllString(text, -1))
		name, _ := filepath.Rel(root, doc)
		for _, b := range brokenAnchors(doc, text, read) {
			t.Errorf("%s links to %s", name, b)
		}
	}
	if checked < 10 {
		t.Errorf("only %d heading links found in the docs; the pattern no longer matches how they are written", checked)
	}
}

// TestBrokenAnchors: the anchor check finds a link to a missing heading,
// in the same file and in another, and accepts GitHub's slugs (markup and
// punctuation dropped, repeats numbered, code blocks ignored).
func TestBrokenAnchors(t *testing.T) {
	other := "# Performance\n\n## What the code keeps for speed\n\n## Latest results\n## Latest results\n\n```sh\n# not a heading\n```\n"
	doc := "## `make e2e-kube`\n## Node-local storage (the node-local mode)\n## [Link](x.md) text\n" +
		"[a](#make-e2e-kube) [b](#node-local-storage-the-node-local-mode) [c](#link-text) [d](#nope)\n" +
		"[e](other.md#what-the-code-keeps-for-speed) [f](other.md#latest-results-1) [g](other.md#real-work) [h](other.md#not-a-heading)\n"
	got := brokenAnchors("/d/doc.md", doc, func(p string) (string, error) {
		if p != "/d/other.md" {
			t.Fatalf("read %s, want /d/other.md", p)
		}
		return other, nil
	})
	want := []string{
		"#nope (no such heading in doc.md)",
		"other.md#real-work (no such heading in other.md)",
		"other.md#not-a-heading (no such heading in other.md)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("broken anchors %q, want %q", got, want)
	}
}
