package docref

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository root, two folders up from this package.
const root = "../.."

// docs returns README.md and every docs/*.md, relative to root.
func docs(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(root, "README.md"))
	if len(files) < 2 {
		t.Fatalf("no docs found under %s", root)
	}
	return files
}

var (
	// proofRef is `dir/file_test.go:TestA` optionally followed by
	// `, `TestB`` names of the same package.
	proofRef = regexp.MustCompile("`([\\w./-]+_test\\.go):((?:Test|Fuzz|Benchmark)\\w+)`((?:,\\s*`(?:Test|Fuzz|Benchmark)\\w+`)*)")
	moreName = regexp.MustCompile("`((?:Test|Fuzz|Benchmark)\\w+)`")
	// mdLink is a relative Markdown link to a file of the repository.
	mdLink = regexp.MustCompile(`\]\(([^)#:\s]+)(?:#[^)]*)?\)`)
)

// defined reports whether a func named name is declared in a _test.go
// file of dir.
func defined(t *testing.T, dir, name string) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	decl := regexp.MustCompile(`(?m)^func ` + regexp.QuoteMeta(name) + `\(`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if decl.Match(b) {
			return true
		}
	}
	return false
}

func TestProofsExist(t *testing.T) {
	checked := 0
	for _, doc := range docs(t) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, doc)
		for _, m := range proofRef.FindAllStringSubmatch(string(b), -1) {
			file := m[1]
			if !strings.Contains(file, "/") {
				continue // a bare file name continues the previous reference's folder
			}
			path := filepath.Join(root, file)
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s names %s, which does not exist", name, file)
				continue
			}
			names := []string{m[2]}
			for _, more := range moreName.FindAllStringSubmatch(m[3], -1) {
				names = append(names, more[1])
			}
			for _, n := range names {
				checked++
				if !defined(t, filepath.Dir(path), n) {
					t.Errorf("%s names %s:%s, but no test of that name is in %s", name, file, n, filepath.Dir(file))
				}
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d test references found in the docs; the pattern no longer matches how they are written", checked)
	}
}

func TestLinksExist(t *testing.T) {
	for _, doc := range docs(t) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, doc)
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target := filepath.Join(filepath.Dir(doc), m[1])
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s links to %s, which does not exist", name, m[1])
			}
		}
	}
}

// TestKubeTestsListed: the e2e/kube sections of docs/kubernetes.md
// ("`make e2e-kube`" and, for the TestRealNode tests `make e2e-node`
// runs, "Run it on real nodes") name every test of e2e/kube, and every
// test they name in backquotes exists, so a new scenario is never left out
// of the list and a renamed one is never cited.
func TestKubeTestsListed(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "docs", "kubernetes.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := func(heading string) string {
		t.Helper()
		_, s, ok := strings.Cut(string(doc), heading)
		if !ok {
			t.Fatalf("docs/kubernetes.md has no section %q", heading)
		}
		if i := strings.Index(s, "\n## "); i >= 0 {
			s = s[:i]
		}
		return s
	}
	kube, node := section("## `make e2e-kube`"), section("## Run it on real nodes: `make e2e-node`")
	dir := filepath.Join(root, "e2e", "kube")
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	decl := regexp.MustCompile(`(?m)^func (Test\w+)\(t \*testing\.T\)`)
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
			n++
			heading, section := "## `make e2e-kube`", kube
			if strings.HasPrefix(m[1], "TestRealNode") {
				heading, section = "## Run it on real nodes", node
			}
			if !strings.Contains(section, "`"+m[1]+"`") {
				t.Errorf("docs/kubernetes.md, section %q, does not name %s (%s)", heading, m[1], filepath.Base(f))
			}
		}
	}
	if n < 20 {
		t.Errorf("only %d tests found in e2e/kube; the pattern no longer matches how they are declared", n)
	}
	for heading, section := range map[string]string{"## `make e2e-kube`": kube, "## Run it on real nodes": node} {
		for _, m := range moreName.FindAllStringSubmatch(section, -1) {
			if !defined(t, dir, m[1]) {
				t.Errorf("docs/kubernetes.md, section %q, names %s, which e2e/kube does not define", heading, m[1])
			}
		}
	}
}
