package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestOperationsCheckExample: docs/operations.md shows `check` on the
// shipped examples; what it shows is what check prints on them now, so
// the page cannot fall behind the examples again (it once said 6 files
// while check read 11).
func TestOperationsCheckExample(t *testing.T) {
	const cmdLine = "$ proxy-topology check --config examples/proxy.yaml --connections-folder examples/connections\n"
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), cmdLine)
	if !ok {
		t.Fatalf("docs/operations.md has no %q", cmdLine)
	}
	block, _, ok = strings.Cut(block, "```")
	if !ok {
		t.Fatal("docs/operations.md: the check example's code block does not end")
	}

	var out bytes.Buffer
	code := run([]string{"check", "--config", "../../examples/proxy.yaml", "--connections-folder", "../../examples/connections"}, &out, &out)
	got := strings.ReplaceAll(out.String(), "../../examples/", "examples/") + fmt.Sprintf("[exit %d]\n", code)
	if got != block {
		t.Errorf("docs/operations.md shows:\n%s\ncheck prints now:\n%s", block, got)
	}
}
