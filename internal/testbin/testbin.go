// Package testbin builds the proxy-topology binary for tests that run it as
// a separate process (e2e, e2e/kube, csi-sanity's upstream), and tells the
// tests that need root (real bind mounts) whether they may run, skip, or
// must fail because the run requires them (RequireRoot).
package testbin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Build compiles ./cmd/proxy-topology of the module rooted at repoRoot into
// a new temporary directory and returns the binary's path and a cleanup
// that removes the directory. With race the binary gets -race too (pass
// Race so that a data race in the process under test fails a -race
// suite). A cold build with -race takes a while, so it has five minutes.
func Build(repoRoot string, race bool) (path string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "pt-testbin-")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	path = filepath.Join(dir, "proxy-topology")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := []string{"build", "-o", path}
	if race {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/proxy-topology")
	// go test puts GOROOT/bin first in PATH, so "go" is the toolchain
	// running the tests.
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("go %v: %v\n%s", args, err, out)
	}
	return path, cleanup, nil
}
