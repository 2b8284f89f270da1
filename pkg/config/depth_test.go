package config

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/democratic-csi/proxy-topology/pkg/accessible"
)

// nested is a flow mapping n levels deep: {a: {a: … 1 …}}.
func nested(n int) string { return strings.Repeat("{a: ", n) + "1" + strings.Repeat("}", n) }

// allocated is the bytes f allocates: a count, not a time, that holds on
// a loaded machine.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestDepthLimit (issue 38, probe 3): 9,999 levels of {a: {a: …}} (50 KB)
// in the main config cost check 967 MB and 5.7 s (koanf makes a dotted key
// of every level) and warned with a 20,000-character key. The main config
// and connection files alike now stop at MaxDepth, naming the file and
// the line, before anything decodes them into keys.
func TestDepthLimit(t *testing.T) {
	mainDoc := func(extra string) []byte {
		return []byte("driver: proxy\nproxy:\n  configFolder: /tmp/c\nextra: " + extra + "\n")
	}
	connDoc := func(extra string) []byte {
		return []byte("driver: csi\ncsi:\n  endpoint: unix:///csi/x.sock\nextra: " + extra + "\n")
	}
	loadMain := func(data []byte) error { _, err := LoadMain("deep.yaml", data, nil); return err }
	loadConn := func(data []byte) error {
		_, _, err := ParseConnection("conns/deep.yaml", data, accessible.Options{Prefix: "p.example.com"})
		return err
	}
	loadFile := func(data []byte) error {
		_, err := ParseFile("conns/deep.yaml", data, accessible.Options{Prefix: "p.example.com"})
		return err
	}
	for _, tc := range []struct {
		name string
		doc  func(string) []byte
		load func([]byte) error
		want string
	}{
		{"main config", mainDoc, loadMain, "config deep.yaml: line 4: nested deeper than 64 levels"},
		{"connection file", connDoc, loadConn, "file conns/deep.yaml: line 4: nested deeper than 64 levels"},
		{"connection folder file", connDoc, loadFile, "file conns/deep.yaml: line 4: nested deeper than 64 levels"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			data := tc.doc(nested(9999))
			bytes := allocated(func() { err = tc.load(data) })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("9,999 levels: %v, want %q", err, tc.want)
			}
			// yaml.v3 parses the file once into nodes (about 2.5 KB a
			// level); koanf's keys cost the square of the depth.
			if bytes > 64<<20 {
				t.Errorf("refusing 9,999 levels allocated %d MiB, want under 64", bytes>>20)
			}
			// The limit itself: "extra" is one level, so MaxDepth-1 more fit.
			if err := tc.load(tc.doc(nested(MaxDepth - 1))); err != nil && strings.Contains(err.Error(), "nested deeper") {
				t.Errorf("%d levels refused: %v", MaxDepth, err)
			}
			if err := tc.load(tc.doc(nested(MaxDepth))); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%d levels: %v, want %q", MaxDepth+1, err, tc.want)
			}
		})
	}
}

// TestDepthWalkBounded: the check stops at the first node past the limit
// and measures a node shared by aliases once, so it never walks more than
// the limit down, nor more than the document across.
func TestDepthWalkBounded(t *testing.T) {
	parse := func(s string) *yaml.Node {
		var doc yaml.Node
		if err := yaml.NewDecoder(bytes.NewReader([]byte(s))).Decode(&doc); err != nil {
			t.Fatal(err)
		}
		return &doc
	}
	d := depthCheck{height: map[*yaml.Node]int{}}
	if d.within(parse("x: "+nested(9999)), MaxDepth) {
		t.Fatal("9,999 levels within the limit")
	}
	if d.walked > 3*MaxDepth {
		t.Errorf("walked %d nodes of a 9,999-level document, want at most %d", d.walked, 3*MaxDepth)
	}

	// An anchor 40 deep under an alias 40 deep expands to 80 levels.
	deepAlias := "a: &x " + nested(40) + "\nb: " + strings.Repeat("{b: ", 39) + "*x" + strings.Repeat("}", 39) + "\n"
	if err := checkDepth("file f.yaml", parse(deepAlias)); err == nil || !strings.Contains(err.Error(), "file f.yaml: line 2: nested deeper than 64") {
		t.Errorf("an alias expanding past the limit: %v", err)
	}
	// 1,000 aliases of one anchor are measured once.
	var sb strings.Builder
	sb.WriteString("a: &x " + nested(30) + "\nl:\n")
	for range 1000 {
		sb.WriteString("- *x\n")
	}
	d = depthCheck{height: map[*yaml.Node]int{}}
	if !d.within(parse(sb.String()), MaxDepth) {
		t.Fatalf("32 levels refused (line %d)", d.line)
	}
	if d.walked > 1000+2*30+10 {
		t.Errorf("walked %d nodes, want each once", d.walked)
	}
}

// TestWarningsOneLine: a key path in a warning is cut and quoted, so a
// warning is one line of bounded length whatever the file holds.
func TestWarningsOneLine(t *testing.T) {
	long := strings.Repeat("k", 100)
	deep := strings.Repeat("{"+long+": ", 60) + "1" + strings.Repeat("}", 60)
	l, err := LoadMain("m.yaml", []byte("driver: proxy\nproxy:\n  configFolder: /tmp/c\nextra: "+deep+"\n\"new\\nline\": 1\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Warnings) != 2 {
		t.Fatalf("warnings %q, want 2", l.Warnings)
	}
	for _, w := range l.Warnings {
		if len(w) > 400 || strings.ContainsAny(w, "\n\r\x1b") {
			t.Errorf("warning of %d bytes, or not one line: %q", len(w), w)
		}
	}
	if want := fmt.Sprintf("(%d bytes)", len("extra")+60*(len(long)+1)); !strings.Contains(l.Warnings[0], want) {
		t.Errorf("the cut key path does not say its length %s: %s", want, l.Warnings[0])
	}
	if !strings.Contains(l.Warnings[1], `unknown key "new\nline"`) {
		t.Errorf("a key with a newline is not quoted: %q", l.Warnings[1])
	}
}
