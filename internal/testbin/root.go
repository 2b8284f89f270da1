package testbin

import (
	"os"
	"testing"
)

// RequireRootEnv names the variable that makes tests needing root fail
// instead of skip. make test sets it (CI runs make test as root): a suite
// CI counts on must never pass there by skipping.
const RequireRootEnv = "PROXY_TOPOLOGY_REQUIRE_ROOT"

// RequireRoot skips t unless the process runs as root, saying why root is
// needed; with PROXY_TOPOLOGY_REQUIRE_ROOT=1 it fails t instead.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	if !rootOrFail(t, why) {
		t.Skip("not root: " + why)
	}
}

// HaveRoot reports whether the process runs as root, for a test that runs
// its root-only part only then. When it is not root it logs why that part
// is left out; with PROXY_TOPOLOGY_REQUIRE_ROOT=1 it fails t instead.
func HaveRoot(t testing.TB, why string) bool {
	t.Helper()
	if !rootOrFail(t, why) {
		t.Log("not root: " + why + "; that part is skipped")
		return false
	}
	return true
}

func rootOrFail(t testing.TB, why string) bool {
	t.Helper()
	if os.Geteuid() == 0 {
		return true
	}
	if os.Getenv(RequireRootEnv) == "1" {
		t.Fatalf("not root: %s; %s=1 says this run must not skip it", why, RequireRootEnv)
	}
	return false
}
