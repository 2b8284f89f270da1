package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The test binary links gRPC's server transport (through bench/serve), so
// it has layoutSymbol.
func TestCheckLayouts(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := symbolAddress(self, layoutSymbol); err != nil {
		t.Fatalf("the test binary: %v", err)
	}
	notELF := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}

	// Two servers from one binary share a layout: refused, naming both.
	_, err = checkLayouts([][2]string{{"one", self}, {"two", self}}, nil)
	if err == nil || !strings.Contains(err.Error(), "one and two run gRPC's server transport at the same address") {
		t.Fatalf("same binary twice: %v", err)
	}

	// An A/B's compare build may share the proxy's layout: described only;
	// a binary without the symbol is named as not checked.
	line, err := checkLayouts([][2]string{{"proxy", self}}, [][2]string{{"compare", self}, {"script", notELF}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(line, "compare 0x") || !strings.Contains(line, "(as proxy)") || !strings.Contains(line, "not checked: script") {
		t.Fatalf("line = %q", line)
	}
}
