package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

// TestReadFileRefusesWhatIsNoConfig: a real FIFO, a real symlink to
// /dev/zero, a directory and a file over MaxFileSize are refused at once
// with the file named; a regular file of exactly MaxFileSize and a
// symlink to a regular file are read.
func TestReadFileRefusesWhatIsNoConfig(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	testkit.Mkfifo(t, fifo)
	zero := filepath.Join(dir, "zero.yaml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("driver: csi\n# "+strings.Repeat("x", 10<<20)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	exact := filepath.Join(dir, "exact.yaml")
	if err := os.WriteFile(exact, []byte(strings.Repeat("#", MaxFileSize)), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink(exact, link); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub.yaml")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, want string
	}{
		{fifo, "read " + fifo + ": not a regular file (a named pipe, mode p"},
		{zero, "read " + zero + ": not a regular file (a character device, mode Dc"},
		{big, "read " + big + ": larger than the 1024 KiB limit for a config file"},
		{sub, "read " + sub + ": is a directory"},
		{filepath.Join(dir, "missing.yaml"), "open " + filepath.Join(dir, "missing.yaml") + ": no such file or directory"},
	} {
		done := make(chan error, 1)
		go func() { _, err := ReadFile(tc.path); done <- err }()
		select {
		case err := <-done:
			var pe *fs.PathError
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) || !errors.As(err, &pe) {
				t.Errorf("ReadFile(%s) = %v; want a *fs.PathError starting %q", filepath.Base(tc.path), err, tc.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("ReadFile(%s) blocked", filepath.Base(tc.path))
		}
	}
	for _, p := range []string{exact, link} {
		if data, err := ReadFile(p); err != nil || len(data) != MaxFileSize {
			t.Errorf("ReadFile(%s) = %d bytes, %v; want %d bytes", filepath.Base(p), len(data), err, MaxFileSize)
		}
	}
	if _, err := LoadMainFile(fifo); err == nil || !strings.Contains(err.Error(), "config "+fifo+": read "+fifo+": not a regular file") {
		t.Errorf("LoadMainFile(fifo) = %v", err)
	}
}
