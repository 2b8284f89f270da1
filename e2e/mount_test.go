package e2e

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// mountPoints returns every mount point of this process's mount namespace;
// the plugins run in the same namespace, so their bind mounts show here.
// It does not use pkg/hostpath's mountinfo parser on purpose: the checks
// must not trust the code they check.
func mountPoints(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatalf("read mountinfo: %v", err)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// proc(5): "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 …";
		// field 5 is the mount point, with space, tab, newline and
		// backslash written as \ooo.
		f := strings.Fields(sc.Text())
		if len(f) > 4 {
			out = append(out, unescapeOctal(f[4]))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read mountinfo: %v", err)
	}
	return out
}

func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// isMounted reports whether path is a mount point. The kernel reports
// resolved paths, and the test's directories are resolved when created.
func isMounted(t *testing.T, path string) bool {
	t.Helper()
	path = filepath.Clean(path)
	for _, m := range mountPoints(t) {
		if m == path {
			return true
		}
	}
	return false
}

// mountsUnder lists the mount points at or below dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	dir = filepath.Clean(dir)
	var out []string
	for _, m := range mountPoints(t) {
		if m == dir || strings.HasPrefix(m, dir+"/") {
			out = append(out, m)
		}
	}
	return out
}

// forceUnmount detaches everything stacked on path. It is the safety net
// run in cleanups, so a failing test never leaves mounts behind.
func forceUnmount(t *testing.T, path string) {
	t.Helper()
	for range 8 {
		if !isMounted(t, path) {
			return
		}
		if err := unix.Unmount(path, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil {
			t.Errorf("unmount %s: %v", path, err)
			return
		}
	}
	t.Errorf("%s is still mounted after 8 unmounts", path)
}

// cleanupMounts registers a cleanup that unmounts paths (in reverse order,
// so a publish is undone before the stage it binds from).
func cleanupMounts(t *testing.T, paths ...string) {
	t.Cleanup(func() {
		for i := len(paths) - 1; i >= 0; i-- {
			if !isMounted(t, paths[i]) {
				continue
			}
			// After an earlier failure a leftover mount is expected;
			// in a passing test it is a bug of its own.
			if t.Failed() {
				t.Logf("%s was left mounted; unmounting it", paths[i])
			} else {
				t.Errorf("%s was left mounted; unmounting it", paths[i])
			}
			forceUnmount(t, paths[i])
		}
	})
}
