package hostpath

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Crash windows, for the crash test (e2e/crash_test.go) only: the
// environment variable PROXY_TOPOLOGY_TEST_HOSTPATH_WINDOWS, a list like
// "data-placed=30ms,record-removed=30ms", makes the driver pause at those
// points, so that a kill -9 lands inside the otherwise microseconds-wide
// gaps between the steps of a create or a delete and the recovery of what
// they leave is exercised. Unset (always, outside that test), nothing
// pauses.
//
//   - data-placed: a create has renamed its data into place and not yet
//     its record;
//   - record-removed: a delete has made its journal entry (or removed a
//     snapshot's record) durable and not yet removed the data;
//   - journal-appended: an entry is in the log, not yet synced;
//   - compaction-start, -written, -synced, -removed and replay-start:
//     the steps of a compaction and of the replay at start (compact.go).
const windowsEnv = "PROXY_TOPOLOGY_TEST_HOSTPATH_WINDOWS"

var windows = parseWindows(os.Getenv(windowsEnv))

func parseWindows(spec string) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, item := range strings.Split(spec, ",") {
		name, d, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			continue
		}
		if dur, err := time.ParseDuration(d); err == nil {
			out[name] = dur
		}
	}
	return out
}

// window pauses at the named point when the test asked for it.
func window(name string) {
	if d, ok := windows[name]; ok {
		time.Sleep(d)
	}
}

// testHook, set by this package's tests only, is called at every
// testPoint: the power-loss tests copy the file system's image there.
var testHook atomic.Pointer[func(point string)]

// testPoint is a named step of the journal (journal-appended; replay-start;
// compaction-start, -written, -synced, -removed): a crash window for the
// crash test and a power-cut point for the unit tests.
func testPoint(name string) {
	window(name)
	if h := testHook.Load(); h != nil {
		(*h)(name)
	}
}

// compactAtEnv, for the crash test only, sets the size at which a journal
// log is compacted, so that a short storm compacts many times.
const compactAtEnv = "PROXY_TOPOLOGY_TEST_HOSTPATH_COMPACT_AT"

func testCompactAt(def int64) int64 {
	if n, err := strconv.ParseInt(os.Getenv(compactAtEnv), 10, 64); err == nil && n > 0 {
		return n
	}
	return def
}
