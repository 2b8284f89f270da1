package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckQuotesNames (issue 38, probe 6): check printed file names raw,
// so a file named with a newline split its report line (a CI parser could
// be fed a forged "…: ok") and an ESC reached the terminal. Names that are
// not plain text are now quoted Go style, and every message stays on its
// line: the report has one line per file and nothing else.
func TestCheckQuotesNames(t *testing.T) {
	dir := t.TempDir()
	folder := filepath.Join(dir, "conns\x1b[2J")
	if err := os.Mkdir(folder, 0o750); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "proxy.yaml")
	writeMainConfig(t, cfg, nodeNameMain, folder)
	files := map[string]string{
		"good.yaml":                    "driver: csi\ncsi:\n  endpoint: unix:///csi/good.sock\n",
		"evil\nforged.yaml: ok\nx.yml": "driver: csi\n",
		"\x1b[31mred.yml":              "driver: csi\n",
		"base.yaml":                    "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: \"rel\\nforged.yaml: ok\"\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(folder, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var out, errb bytes.Buffer
	code := run([]string{"check", "--config", cfg}, &out, &errb)
	if code != 1 {
		t.Errorf("exit %d, want 1 (base.yaml has an error)\n%s%s", code, out.String(), errb.String())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 1+len(files)+1 {
		t.Errorf("%d lines, want one per file and the summary:\n%s", len(lines), out.String())
	}
	for _, l := range lines {
		if strings.ContainsAny(l, "\x1b\r") {
			t.Errorf("an ESC or CR reaches the terminal: %q", l)
		}
		if strings.HasPrefix(l, "forged.yaml") {
			t.Errorf("a forged line: %q", l)
		}
	}
	for _, want := range []string{
		`"` + folder[:len(folder)-4] + `\x1b[2J/evil\nforged.yaml: ok\nx.yml": warning: ignored by the proxy`,
		`rename it to "evil\nforged.yaml: ok\nx.yaml"`,
		`"` + folder[:len(folder)-4] + `\x1b[2J/\x1b[31mred.yml": warning:`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %s:\n%s", want, out.String())
		}
	}
}
