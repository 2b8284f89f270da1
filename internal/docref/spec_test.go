package docref

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var (
	// specSection is a section heading of docs/spec.md: "## 8. Accessibility".
	specSection = regexp.MustCompile(`(?m)^## (\d+)\. `)
	// specRef is a citation "SPEC §8", also broken over two comment lines
	// ("SPEC\n// §8") and in a list ("SPEC §8, §11").
	specRef = regexp.MustCompile(`SPEC(?:\s|//|#)*§(\d+)((?:(?:,\s*|\s+and\s+|–|-)§?\d+)*)`)
	moreRef = regexp.MustCompile(`\d+`)
	// citing are the files whose "SPEC §n" citations are checked.
	citing = regexp.MustCompile(`\.(go|md|ya?ml|sh)$|(^|/)Makefile$`)
)

// outside are paths beyond the repository that no file may read or name:
// a clone on its own has none of them. Written in pieces so that this
// file does not name them itself.
var outside = []string{
	".." + "/shared",
	"shared" + "/seeds",
	"/work" + "/shared",
	"/work" + "/dcsi",
}

// trackedFiles lists the repository's files relative to root: git's
// index when the tree is a git checkout, else every file under root but
// the ignored build and cache folders.
func trackedFiles(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	if out, err := cmd.Output(); err == nil && len(out) > 0 {
		return strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	}
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() && slices.Contains([]string{".git", ".cache", "bin", ".run", "node_modules"}, d.Name()) {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// specSections reads the section numbers of docs/spec.md.
func specSections(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "spec.md"))
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, m := range specSection.FindAllSubmatch(b, -1) {
		sections[string(m[1])] = true
	}
	return sections
}

// badReferences returns, for one file's content, every "SPEC §n" whose
// section is not in sections and every path outside the repository it
// names.
func badReferences(name string, content []byte, sections map[string]bool) []string {
	var bad []string
	if citing.MatchString(name) {
		for _, m := range specRef.FindAllSubmatch(content, -1) {
			for _, n := range append([][]byte{m[1]}, moreRef.FindAll(m[2], -1)...) {
				if !sections[string(n)] {
					bad = append(bad, fmt.Sprintf("%s cites SPEC §%s, which docs/spec.md does not have", name, n))
				}
			}
		}
	}
	for _, p := range outside {
		if bytes.Contains(content, []byte(p)) {
			bad = append(bad, fmt.Sprintf("%s names %s, outside the repository", name, p))
		}
	}
	return bad
}

// TestSpecReferences: docs/spec.md has sections 1 to 14, every "SPEC §n"
// in a tracked .go, .md, .yaml, .sh file or Makefile names one of them,
// and no tracked file names a path outside the repository.
func TestSpecReferences(t *testing.T) {
	sections := specSections(t)
	for n := 1; n <= 14; n++ {
		if !sections[fmt.Sprint(n)] {
			t.Errorf("docs/spec.md has no section \"## %d. …\"", n)
		}
	}
	cited := 0
	for _, name := range trackedFiles(t) {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			if os.IsNotExist(err) {
				continue // deleted in the work tree, not yet in the index
			}
			t.Fatal(err)
		}
		if citing.MatchString(name) {
			cited += len(specRef.FindAll(b, -1))
		}
		for _, msg := range badReferences(name, b, sections) {
			t.Error(msg)
		}
	}
	if cited < 50 {
		t.Errorf("only %d SPEC citations found; the pattern no longer matches how they are written", cited)
	}
}

// TestBadReferencesFound: the checks above find a citation of a missing
// section, in every form citations take, and a path outside the
// repository.
func TestBadReferencesFound(t *testing.T) {
	sections := map[string]bool{"8": true, "11": true}
	const missing = "SPEC §" + "15" // in pieces, or this file would cite it
	for _, tc := range []struct {
		name, content string
		want          int
	}{
		{"a.go", "// routes as SPEC §8 says", 0},
		{"a.go", "// routes as " + missing + " says", 1},
		{"a.go", "// as SPEC\n// §" + "15 says", 1},
		{"a.md", "see SPEC §8, §11 and §12", 1},
		{"a.md", "see SPEC §8, §11", 0},
		{"a.yaml", "# SPEC §3", 1},
		{"notes.txt", "SPEC §3", 0}, // not a citing file
		{"a.go", `os.ReadFile("` + ".." + "/shared" + `/seeds/x.md")`, 2},
		{"data.json", `{"peer": "` + "/work" + "/dcsi" + `"}`, 1},
	} {
		if got := badReferences(tc.name, []byte(tc.content), sections); len(got) != tc.want {
			t.Errorf("%s %q: %d findings %q, want %d", tc.name, tc.content, len(got), got, tc.want)
		}
	}
}
