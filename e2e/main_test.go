package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// binary is the proxy-topology executable every test starts.
var binary string

// raceEnabled is set by race_test.go when the suite itself runs with -race;
// the binary is then built with -race too.
var raceEnabled bool

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "pte2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "proxy-topology")

	// A cold build with -race takes a while; a warm one a few seconds.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := []string{"build", "-o", binary}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/proxy-topology")
	// go test runs in the package directory and puts GOROOT/bin first in
	// PATH, so "go" is the toolchain running the tests.
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go %v: %v\n%s", args, err, out)
		return 1
	}
	return m.Run()
}
