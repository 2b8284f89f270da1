package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

// bounded runs f and fails the test if it takes longer than 10 s.
func bounded(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return within 10s", what)
	}
}

// TestCheckSpecialFiles: check over a folder holding a real FIFO, a real
// symlink to /dev/zero and a 10 MiB file answers in bounded time, each
// file refused as serve refuses it (config.ReadFile), while the good file
// next to them is ok.
func TestCheckSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	folder := filepath.Join(dir, "connections")
	if err := os.MkdirAll(folder, 0o750); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "proxy.yaml")
	writeMainConfig(t, cfg, "driver: proxy\n", folder)
	if err := os.WriteFile(filepath.Join(folder, "good.yaml"), []byte("driver: csi\ncsi:\n  endpoint: unix:///csi/good.sock\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testkit.Mkfifo(t, filepath.Join(folder, "fifo.yaml"))
	if err := os.Symlink("/dev/zero", filepath.Join(folder, "zero.yaml")); err != nil {
		t.Fatal(err)
	}
	big := []byte("driver: csi\ncsi:\n  endpoint: unix:///csi/big.sock\n# " + strings.Repeat("x", 10<<20) + "\n")
	if err := os.WriteFile(filepath.Join(folder, "big.yaml"), big, 0o600); err != nil {
		t.Fatal(err)
	}
	var code int
	var out string
	bounded(t, "check", func() { code, out, _ = runArgs("check", "--config", cfg, "--csi-endpoint", "unix:///run/own.sock") })
	want := cfg + ": ok\n" +
		folder + "/big.yaml: error: read: larger than the 1024 KiB limit for a config file\n" +
		folder + "/fifo.yaml: error: read: not a regular file (a named pipe, mode p---------)\n" +
		folder + "/good.yaml: ok\n" +
		folder + "/zero.yaml: error: read: not a regular file (a character device, mode Dc---------)\n" +
		"checked 5 files: 2 ok, 0 with warnings, 3 with errors\n"
	if code != exitFailed || out != want {
		t.Errorf("exit %d (want 1)\ngot:\n%s\nwant:\n%s", code, out, want)
	}
}

// TestConfigSpecialFiles: --config naming a real FIFO or a real symlink
// to /dev/zero makes check, the topology dry run and serve fail in bounded
// time with the file named, never block or fill memory.
func TestConfigSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	testkit.Mkfifo(t, fifo)
	zero := filepath.Join(dir, "zero.yaml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, why string }{
		{fifo, "not a regular file (a named pipe"},
		{zero, "not a regular file (a character device"},
	} {
		name := filepath.Base(tc.path)
		t.Run(name, func(t *testing.T) {
			var code int
			var out, errOut string
			bounded(t, "check", func() { code, out, _ = runArgs("check", "--config", tc.path) })
			if want := tc.path + ": error: read: " + tc.why; code != exitFailed || !strings.HasPrefix(out, want) {
				t.Errorf("check: exit %d, stdout:\n%s\nwant exit 1 and %q", code, out, want)
			}
			bounded(t, "topology", func() { code, _, errOut = runTopology(t, "--config", tc.path, "--node-name", "n1") })
			if want := "config " + tc.path + ": read " + tc.path + ": " + tc.why; code != exitUsage || !strings.Contains(errOut, want) {
				t.Errorf("topology: exit %d, stderr:\n%s\nwant exit 2 and %q", code, errOut, want)
			}
			var logs bytes.Buffer
			var err error
			o := Options{Config: tc.path, Endpoint: "unix://" + filepath.Join(testkit.SocketDir(t), "csi.sock"), NodeID: "n1", Mode: "all", ShutdownTimeout: time.Second}
			bounded(t, "serve", func() { err = Serve(t.Context(), o, slog.New(slog.NewTextHandler(&logs, nil))) })
			if want := "config " + tc.path + ": read " + tc.path + ": " + tc.why; err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("serve: %v; want %q", err, want)
			}
		})
	}
}
