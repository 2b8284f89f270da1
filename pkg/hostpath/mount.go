package hostpath

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/mount-utils"
)

// Mount handling is k8s.io/mount-utils, as in kubelet and the reference CSI
// drivers: whether a path is a mount point (IsMountPoint, which resolves
// symlinks and detects bind mounts of the same file system), which paths
// show a volume directory (GetMountRefs), the mount table (List) and the
// teardown of a target path (CleanupMountPoint).
//
// Only the two calls that change the mount table are hand-written, as
// system calls, in mounter below: mount-utils' Linux Mounter runs mount(8)
// and umount(8), which the image (distroless/static, see the Dockerfile)
// does not contain, and umount(8) follows a target that was swapped for a
// symlink, which umount2(UMOUNT_NOFOLLOW) refuses to do. No module in
// go.mod mounts by system call (moby/sys/mount would, but is not a
// dependency).

// mounter is mount-utils' Linux Mounter with Mount and Unmount done by
// system calls; everything that reads the mount table is mount-utils'.
// With an injected mount.Interface (Options.Mounter: mount-utils'
// FakeMounter in tests that do not test the mount itself) every call goes
// to it instead, and what the driver reads of the kernel (the inode a
// mount shows, its read-only flag, the raw mount table) is read from its
// List.
type mounter struct {
	mount.Interface
	// sys: the system-call mounter, reading the kernel's mount table.
	sys bool
}

var _ mount.Interface = (*mounter)(nil)

// newMounter returns the system-call mounter, or one that delegates to
// injected when it is set. The system one wraps the zero mount.Mounter
// rather than mount.New(""): New runs umount(8) once to probe its "not
// mounted" message, which only its own Unmount uses, and that is
// replaced here.
func newMounter(injected mount.Interface) *mounter {
	if injected != nil {
		return &mounter{Interface: injected}
	}
	return &mounter{Interface: &mount.Mounter{}, sys: true}
}

// Mount bind-mounts source on target. options must contain "bind" (a
// directory volume can only be bound); the others are mount_flags as
// mountFlags accepts them ("ro", "nosuid", ...). fstype is ignored.
//
// The kernel ignores MS_RDONLY and friends on the initial MS_BIND, so they
// take effect through a second MS_REMOUNT|MS_BIND, as in mount-utils. That
// remount replaces the per-mount flags, so it also carries the nosuid,
// nodev and noexec of source's own mount (as mount-utils does from statfs),
// which the bind alone inherits and the remount would otherwise drop. A
// failed remount undoes the bind, so that a failed read-only publish never
// leaves a writable mount behind.
func (m *mounter) Mount(source, target, _ string, options []string) error {
	var bind bool
	rest := make([]string, 0, len(options))
	for _, o := range options {
		if o == "bind" {
			bind = true
			continue
		}
		rest = append(rest, o)
	}
	if !bind {
		return fmt.Errorf("mount %s on %s: only bind mounts are supported, options %q lack \"bind\"", source, target, options)
	}
	flags, readonly, err := mountFlags(rest)
	if err != nil {
		return fmt.Errorf("mount %s on %s: %w", source, target, err)
	}
	if !m.sys {
		return m.Interface.Mount(source, target, "", options)
	}
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return &os.PathError{Op: "bind mount " + source + " on", Path: target, Err: err}
	}
	if !readonly && flags == 0 {
		return nil
	}
	remount := unix.MS_REMOUNT | unix.MS_BIND | flags
	if readonly {
		remount |= unix.MS_RDONLY
	}
	var st unix.Statfs_t
	err = unix.Statfs(source, &st)
	if err == nil {
		remount |= uintptr(st.Flags) & (unix.ST_NOSUID | unix.ST_NODEV | unix.ST_NOEXEC)
		err = unix.Mount("", target, "", remount, "")
	}
	if err != nil {
		uerr := unix.Unmount(target, unix.UMOUNT_NOFOLLOW)
		return errors.Join(fmt.Errorf("remount %s with flags %#x: %w", target, remount, err), uerr)
	}
	return nil
}

// MountSensitive and the WithoutSystemd variants are Mount: no option of a
// bind mount is secret, and no systemd scope is involved.
func (m *mounter) MountSensitive(source, target, fstype string, options, sensitive []string) error {
	return m.Mount(source, target, fstype, append(append([]string(nil), options...), sensitive...))
}

func (m *mounter) MountSensitiveWithoutSystemd(source, target, fstype string, options, sensitive []string) error {
	return m.MountSensitive(source, target, fstype, options, sensitive)
}

func (m *mounter) MountSensitiveWithoutSystemdWithMountFlags(source, target, fstype string, options, sensitive, _ []string) error {
	return m.MountSensitive(source, target, fstype, options, sensitive)
}

// maxStacked bounds Unmount's loop: more mounts stacked on one path than
// this means something else keeps mounting there.
const maxStacked = 16

// Unmount unmounts everything stacked on target. It succeeds when target
// is not (or no longer) a mount point, including when it does not exist,
// so CanSafelySkipMountPointCheck is true.
func (m *mounter) Unmount(target string) error {
	for range maxStacked {
		if mounted, err := m.isMountPoint(target); err != nil || !mounted {
			return err
		}
		if !m.sys {
			if err := m.Interface.Unmount(target); err != nil {
				return err
			}
			continue
		}
		// UMOUNT_NOFOLLOW: a target swapped for a symlink must not make us
		// unmount whatever it points to (IsMountPoint resolves symlinks, so
		// such a target ends in the "still mounted" error below).
		if err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) {
			return &os.PathError{Op: "unmount", Path: target, Err: err}
		}
	}
	return fmt.Errorf("unmount %s: still mounted after %d unmounts", target, maxStacked)
}

func (m *mounter) CanSafelySkipMountPointCheck() bool { return true }

// isMountPoint is IsMountPoint with a missing path reported as not mounted.
func (m *mounter) isMountPoint(path string) (bool, error) {
	mounted, err := m.IsMountPoint(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return mounted, err
}

// mountsOf lists the mount points that show dir: bind mounts of it, and
// binds of those binds (the same root of the same file system).
func (m *mounter) mountsOf(dir string) ([]string, error) {
	refs, err := m.GetMountRefs(dir)
	for i, r := range refs {
		refs[i] = unescapeMountPath(r)
	}
	return refs, err
}

// mentions reports whether any line of this process's mount table holds s
// (a volume id): a bind mount of a volume directory shows it in its root,
// a mount at or below it in its mount point. One read of the table, no
// parsing: a delete with no mount anywhere near its volume (the usual case)
// skips mountsOf and mountsBelow, which read and parse the table twice more.
// Mount paths escape only space, tab, newline and backslash, which no id
// local-hostpath makes contains.
func (m *mounter) mentions(s string) (bool, error) {
	if !m.sys {
		mps, err := m.List()
		for _, mp := range mps {
			if strings.Contains(mp.Path, s) || strings.Contains(mp.Device, s) {
				return true, err
			}
		}
		return err != nil, err
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return true, err
	}
	return bytes.Contains(data, []byte(s)), nil
}

// mountsBelow lists mount points strictly inside dir.
func (m *mounter) mountsBelow(dir string) ([]string, error) {
	mps, err := m.List()
	if err != nil {
		return nil, err
	}
	prefix := resolvePath(dir) + "/"
	var out []string
	for _, mp := range mps {
		if p := unescapeMountPath(mp.Path); strings.HasPrefix(p, prefix) {
			out = append(out, p)
		}
	}
	return out, nil
}

// readOnly reports whether the mount at path is read-only: statfs with the
// system mounter, the "ro" option of the injected one's entry otherwise.
func (m *mounter) readOnly(path string) (bool, error) {
	if m.sys {
		return mountReadOnly(path)
	}
	mp, ok, err := m.entry(path)
	return ok && slices.Contains(mp.Opts, "ro"), err
}

// shows reports whether path shows dir: the same inode (a bind mount of
// dir, or dir itself) with the system mounter; with the injected one, an
// entry of its table mounted at path from dir.
func (m *mounter) shows(path, dir string) bool {
	if m.sys {
		return isMountOf(path, dir)
	}
	mp, ok, err := m.entry(path)
	return err == nil && ok && (mp.Device == dir || mp.Device == resolvePath(dir))
}

// entry is the injected mounter's table entry for the mount at path.
func (m *mounter) entry(path string) (mount.MountPoint, bool, error) {
	mps, err := m.List()
	if err != nil {
		return mount.MountPoint{}, false, err
	}
	want := resolvePath(path)
	for i := len(mps) - 1; i >= 0; i-- { // the latest mount on path is on top
		if mps[i].Path == want || mps[i].Path == path {
			return mps[i], true, nil
		}
	}
	return mount.MountPoint{}, false, nil
}

// mountReadOnly reports whether the mount that shows path is read-only.
// statfs reports the per-mount flags (since Linux 2.6.36), so a read-only
// bind of a writable file system says ST_RDONLY.
func mountReadOnly(path string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	return st.Flags&unix.ST_RDONLY != 0, nil
}

// unescapeMountPath undoes the kernel's octal escaping of the characters
// that would break the mount table's format. mount-utils returns mount
// points as the kernel wrote them ("a\040b" for "a b") and GetMountRefs
// compares paths in that form, which is why Options.Validate keeps those
// characters out of BasePath.
var unescapeMountPath = strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace

// mountTableSpecial are the characters the kernel escapes in the mount table.
const mountTableSpecial = " \t\n\\"

// resolvePath returns path with symlinks resolved when possible, else path
// cleaned: the kernel reports mount points resolved.
func resolvePath(path string) string {
	if r, err := filepath.EvalSymlinks(path); err == nil {
		return r
	}
	return filepath.Clean(path)
}

// isMountOf reports whether path currently shows the directory dir: a bind
// mount of dir shows dir's own inode at its mount point. Comparing inodes
// instead of mount table device numbers also works on btrfs and overlayfs,
// whose stat device differs from the one in the mount table.
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
