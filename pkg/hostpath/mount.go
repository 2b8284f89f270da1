package hostpath

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// mountInfo is one line of /proc/self/mountinfo (see proc(5)).
type mountInfo struct {
	ID, Parent   int
	Major, Minor int
	// Root is the directory of the source file system that is mounted,
	// relative to that file system's root: for a bind mount of
	// /base/volumes/vol-x it ends in "/volumes/vol-x".
	Root       string
	MountPoint string
	// Options are the per-mount options ("rw,nosuid,relatime").
	Options      string
	FSType       string
	Source       string
	SuperOptions string
}

func (m *mountInfo) readOnly() bool {
	return slices.Contains(strings.Split(m.Options, ","), "ro")
}

const mountInfoPath = "/proc/self/mountinfo"

// readMountInfo reads the mount table of this process's mount namespace. It
// is read fresh on every call: mounts change behind our back (kubelet, other
// drivers) and the table is small.
func readMountInfo() ([]mountInfo, error) {
	b, err := os.ReadFile(mountInfoPath)
	if err != nil {
		return nil, err
	}
	return parseMountInfo(bytes.NewReader(b))
}

// parseMountInfo parses the mountinfo format:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//
// The optional fields before "-" vary in number, and paths have space, tab,
// newline and backslash escaped as \ooo octal.
func parseMountInfo(r io.Reader) ([]mountInfo, error) {
	var out []mountInfo
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if len(f) < 10 || sep < 6 || len(f) < sep+4 {
			return nil, fmt.Errorf("mountinfo line %d: unexpected format %q", n, line)
		}
		var m mountInfo
		var err error
		if m.ID, err = strconv.Atoi(f[0]); err != nil {
			return nil, fmt.Errorf("mountinfo line %d: mount id: %w", n, err)
		}
		if m.Parent, err = strconv.Atoi(f[1]); err != nil {
			return nil, fmt.Errorf("mountinfo line %d: parent id: %w", n, err)
		}
		maj, min, ok := strings.Cut(f[2], ":")
		if !ok {
			return nil, fmt.Errorf("mountinfo line %d: device %q is not major:minor", n, f[2])
		}
		if m.Major, err = strconv.Atoi(maj); err != nil {
			return nil, fmt.Errorf("mountinfo line %d: major: %w", n, err)
		}
		if m.Minor, err = strconv.Atoi(min); err != nil {
			return nil, fmt.Errorf("mountinfo line %d: minor: %w", n, err)
		}
		m.Root = unescapeMountPath(f[3])
		m.MountPoint = unescapeMountPath(f[4])
		m.Options = f[5]
		m.FSType = f[sep+1]
		m.Source = unescapeMountPath(f[sep+2])
		m.SuperOptions = f[sep+3]
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// unescapeMountPath undoes the kernel's \ooo escaping of mountinfo paths.
func unescapeMountPath(s string) string {
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

// mountAt returns the topmost mount whose mount point is path, or nil.
// path is resolved through symlinks first because the kernel reports
// resolved paths.
func mountAt(mounts []mountInfo, path string) *mountInfo {
	p := resolvePath(path)
	for i := len(mounts) - 1; i >= 0; i-- {
		if mounts[i].MountPoint == p {
			return &mounts[i]
		}
	}
	return nil
}

// resolvePath returns path with symlinks resolved when possible, else path
// cleaned.
func resolvePath(path string) string {
	if r, err := filepath.EvalSymlinks(path); err == nil {
		return r
	}
	return filepath.Clean(path)
}

// isMountOf reports whether path currently shows the directory dir: a bind
// mount of dir shows dir's own inode at its mount point. Comparing inodes
// instead of mountinfo device numbers also works on btrfs and overlayfs,
// whose stat device differs from the one in mountinfo.
func isMountOf(path, dir string) bool {
	a, err := os.Stat(path)
	if err != nil {
		return false
	}
	b, err := os.Stat(dir)
	if err != nil {
		return false
	}
	return os.SameFile(a, b)
}

// mountsOf lists the mount points that show dir (bind mounts of it, and
// binds of those binds). Candidates are picked by their mountinfo root,
// which ends in the directory's own name (IDs are unique), and confirmed by
// inode so that a same-named directory elsewhere never matches; only our
// own bind mounts are ever stat'ed, never an arbitrary (possibly hung
// network) mount.
func mountsOf(mounts []mountInfo, dir string) []string {
	suffix := "/" + filepath.Base(dir)
	var out []string
	for _, m := range mounts {
		if !strings.HasSuffix(m.Root, suffix) || slices.Contains(out, m.MountPoint) {
			continue
		}
		if isMountOf(m.MountPoint, dir) {
			out = append(out, m.MountPoint)
		}
	}
	return out
}

// bindMount binds source onto target and, when readonly or extra flags are
// asked for, remounts it: the kernel ignores MS_RDONLY and friends on the
// initial MS_BIND, so they only take effect through MS_REMOUNT|MS_BIND. A
// failed remount undoes the bind so that a failed read-only publish never
// leaves a writable mount behind.
func bindMount(source, target string, readonly bool, flags uintptr) error {
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount %s on %s: %w", source, target, err)
	}
	if !readonly && flags == 0 {
		return nil
	}
	remount := unix.MS_REMOUNT | unix.MS_BIND | flags
	if readonly {
		remount |= unix.MS_RDONLY
	}
	if err := unix.Mount("", target, "", remount, ""); err != nil {
		uerr := unix.Unmount(target, unix.UMOUNT_NOFOLLOW)
		return errors.Join(fmt.Errorf("remount %s with flags %#x: %w", target, remount, err), uerr)
	}
	return nil
}

// unmountAll unmounts everything stacked on target. It succeeds when target
// is not (or no longer) a mount point, including when it does not exist.
func unmountAll(target string) error {
	for range 16 { // more stacked mounts than this means something else keeps mounting
		mounts, err := readMountInfo()
		if err != nil {
			return err
		}
		if mountAt(mounts, target) == nil {
			return nil
		}
		// UMOUNT_NOFOLLOW: a target swapped for a symlink must not make us
		// unmount whatever it points to.
		if err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount %s: %w", target, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted after 16 unmounts", target)
}

// ensureMountDir makes sure dir exists as a directory to mount on. It
// reports whether it created it, so that a failed mount can remove it again.
func ensureMountDir(dir string) (created bool, err error) {
	fi, err := os.Lstat(dir)
	switch {
	case err == nil && fi.IsDir():
		return false, nil
	case err == nil:
		return false, fmt.Errorf("%s exists and is not a directory (%s)", dir, fi.Mode().Type())
	case !errors.Is(err, fs.ErrNotExist):
		return false, err
	}
	if err := os.MkdirAll(filepath.Dir(dir), dirPerm); err != nil {
		return false, err
	}
	if err := os.Mkdir(dir, dirPerm); err != nil && !errors.Is(err, fs.ErrExist) {
		return false, err
	}
	return true, nil
}
