package hostpath

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

func TestUnescapeMountPath(t *testing.T) {
	for in, want := range map[string]string{
		"/var/lib/kubelet/pods/x/mount": "/var/lib/kubelet/pods/x/mount",
		`/a\040b`:                       "/a b",
		`/tab\011and\012newline`:        "/tab\tand\nnewline",
		`/back\134slash\040`:            `/back\slash `,
		`/not\41an\escape`:              `/not\41an\escape`,
	} {
		if got := unescapeMountPath(in); got != want {
			t.Errorf("unescapeMountPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMountFlags(t *testing.T) {
	tests := []struct {
		opts     []string
		flags    uintptr
		readonly bool
		err      string
	}{
		{nil, 0, false, ""},
		{[]string{"rw", "bind", "defaults", ""}, 0, false, ""},
		{[]string{"ro"}, 0, true, ""},
		{[]string{" nosuid ", "nodev", "noexec"}, unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, false, ""},
		{[]string{"noatime", "ro"}, unix.MS_NOATIME, true, ""},
		{[]string{"discard", "nosuid", "vers=4"}, 0, false, `unsupported flag(s) ["discard" "vers=4"]`},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.opts, ","), func(t *testing.T) {
			flags, ro, err := mountFlags(tc.opts)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || flags != tc.flags || ro != tc.readonly {
				t.Errorf("mountFlags = %#x, %t, %v; want %#x, %t", flags, ro, err, tc.flags, tc.readonly)
			}
		})
	}
}

// mkdirs makes each dir under parent and returns their paths.
func mkdirs(t *testing.T, parent string, names ...string) []string {
	t.Helper()
	var out []string
	for _, n := range names {
		p := filepath.Join(parent, n)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

func TestMounterBind(t *testing.T) {
	requireRoot(t)
	m := newMounter(nil)
	dirs := mkdirs(t, mountDir(t), "src", "a", "b with space", "c", "unused")
	src, a, b, c, unused := dirs[0], dirs[1], dirs[2], dirs[3], dirs[4]

	if err := m.Mount(src, unused, "", []string{"ro"}); err == nil || !strings.Contains(err.Error(), `lack "bind"`) {
		t.Errorf("Mount without bind = %v, want a refusal", err)
	}
	if err := m.Mount(src, unused, "", []string{"bind", "discard"}); err == nil || !strings.Contains(err.Error(), "discard") {
		t.Errorf("Mount with discard = %v, want a refusal", err)
	}
	if mounted, err := m.isMountPoint(unused); err != nil || mounted {
		t.Fatalf("refused mounts left %s mounted=%t (%v)", unused, mounted, err)
	}

	for _, mt := range []struct {
		source, target string
		opts           []string
	}{
		{src, a, []string{"bind"}},
		{src, b, []string{"bind", "ro", "nosuid"}},
		{a, c, []string{"bind"}}, // a bind of a bind shows src too
	} {
		if err := m.Mount(mt.source, mt.target, "", mt.opts); err != nil {
			t.Fatalf("Mount(%s, %s, %q): %v", mt.source, mt.target, mt.opts, err)
		}
		defer func() {
			if err := m.Unmount(mt.target); err != nil {
				t.Error(err)
			}
		}()
	}
	for path, wantRO := range map[string]bool{a: false, b: true, c: false} {
		if mounted, err := m.isMountPoint(path); err != nil || !mounted {
			t.Errorf("isMountPoint(%s) = %t, %v", path, mounted, err)
		}
		if ro, err := mountReadOnly(path); err != nil || ro != wantRO {
			t.Errorf("mountReadOnly(%s) = %t, %v; want %t", path, ro, err, wantRO)
		}
	}
	if m := isMounted(t, b); m == nil || !slices.Contains(m.MountOptions, "nosuid") {
		t.Errorf("mount table entry of %s = %+v, want nosuid", b, m)
	}
	refs, err := m.mountsOf(src)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(refs)
	if diff := cmp.Diff([]string{a, b, c}, refs); diff != "" {
		t.Errorf("mountsOf (-want +got):\n%s", diff)
	}
	below, err := m.mountsBelow(filepath.Dir(src))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(below)
	if diff := cmp.Diff([]string{a, b, c}, below); diff != "" {
		t.Errorf("mountsBelow (-want +got):\n%s", diff)
	}
	if mounted, err := m.isMountPoint(filepath.Join(src, "missing")); err != nil || mounted {
		t.Errorf("isMountPoint of a missing path = %t, %v; want false, nil", mounted, err)
	}
}

// TestMounterKeepsSourceFlags: the remount that makes a bind read-only
// replaces the mount's flags; it must keep the nosuid, nodev and noexec the
// bind inherited from the volume's file system.
func TestMounterKeepsSourceFlags(t *testing.T) {
	requireRoot(t)
	m := newMounter(nil)
	dir := mountDir(t)
	fsDir, target := mkdirs(t, dir, "fs", "target")[0], filepath.Join(dir, "target")
	if err := unix.Mount("tmpfs", fsDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(fsDir, unix.MNT_DETACH)
	if err := m.Mount(fsDir, target, "", []string{"bind", "ro"}); err != nil {
		t.Fatal(err)
	}
	defer m.Unmount(target)
	e := isMounted(t, target)
	for _, opt := range []string{"ro", "nosuid", "nodev", "noexec"} {
		if e == nil || !slices.Contains(e.MountOptions, opt) {
			t.Errorf("mount table entry %+v lacks %s", e, opt)
		}
	}
}

func TestMounterUnmount(t *testing.T) {
	requireRoot(t)
	m := newMounter(nil)
	dir := mountDir(t)
	dirs := mkdirs(t, dir, "src", "stacked", "plain", "real")
	src, stacked, plain, real := dirs[0], dirs[1], dirs[2], dirs[3]

	// Nothing to do is success: a missing path, a plain directory.
	for _, p := range []string{filepath.Join(dir, "missing"), plain} {
		if err := m.Unmount(p); err != nil {
			t.Errorf("Unmount(%s): %v", p, err)
		}
	}

	// Every mount stacked on the path goes.
	for range 3 {
		if err := m.Mount(src, stacked, "", []string{"bind"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Unmount(stacked); err != nil {
		t.Fatal(err)
	}
	if mounted, err := m.isMountPoint(stacked); err != nil || mounted {
		t.Errorf("after Unmount: mounted=%t, %v", mounted, err)
	}

	// A target swapped for a symlink is not followed to the mount it
	// points at.
	if err := m.Mount(src, real, "", []string{"bind"}); err != nil {
		t.Fatal(err)
	}
	defer m.Unmount(real)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if err := m.Unmount(link); err == nil || !strings.Contains(err.Error(), "still mounted") {
		t.Errorf("Unmount(symlink) = %v, want it to refuse", err)
	}
	if mounted, err := m.isMountPoint(real); err != nil || !mounted {
		t.Errorf("the symlink's target was unmounted: mounted=%t, %v", mounted, err)
	}
	if !m.CanSafelySkipMountPointCheck() || errors.Is(m.Unmount(plain), unix.EINVAL) {
		t.Error("Unmount of something not mounted must succeed")
	}
}
