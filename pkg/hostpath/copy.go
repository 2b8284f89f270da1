package hostpath

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// copyTree copies the directory src to dst, which must not exist: regular
// files, directories, symlinks (never followed), FIFOs, sockets and device
// nodes, keeping permission bits (including setuid/setgid/sticky), owner and
// timestamps. Hard links become separate files; extended attributes and ACLs
// are not copied.
//
// The source is usually a volume that a pod may be writing to right now, so
// it is walked with openat/fstatat relative to already-open directories and
// O_NOFOLLOW: replacing a directory with a symlink mid-copy (to make a root
// process read /etc into a snapshot) makes the copy fail instead of escaping.
// The destination is in the driver's own work directory, which pods cannot
// reach. The copy is not atomic with respect to concurrent writes.
func copyTree(ctx context.Context, src, dst string) error {
	fd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", src, err)
	}
	dir := os.NewFile(uintptr(fd), src)
	defer dir.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", src, err)
	}
	c := copier{ctx: ctx, root: src}
	return c.dir(dir, ".", dst, &st)
}

type copier struct {
	ctx  context.Context
	root string // for messages only
}

func (c *copier) fail(rel, op string, err error) error {
	return fmt.Errorf("copy %s: %s: %w", filepath.Join(c.root, rel), op, err)
}

// dir copies the open directory src (at rel below the root) to dst. The
// destination starts as 0700 so that it can be filled even when the source
// directory is read-only; its real mode is applied last.
func (c *copier) dir(src *os.File, rel, dst string, st *unix.Stat_t) error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		return c.fail(rel, "mkdir", err)
	}
	names, err := src.Readdirnames(-1)
	if err != nil {
		return c.fail(rel, "read directory", err)
	}
	dirfd := int(src.Fd())
	for _, name := range names {
		if err := c.entry(dirfd, name, filepath.Join(rel, name), filepath.Join(dst, name)); err != nil {
			return err
		}
	}
	return c.finish(rel, dst, st, false)
}

func (c *copier) entry(dirfd int, name, rel, dst string) error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return c.fail(rel, "stat", err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return c.fail(rel, "open directory", err)
		}
		sub := os.NewFile(uintptr(fd), name)
		defer sub.Close()
		// Use the opened directory's own attributes: the entry may have
		// been swapped since fstatat.
		if err := unix.Fstat(fd, &st); err != nil {
			return c.fail(rel, "stat", err)
		}
		return c.dir(sub, rel, dst, &st)
	case unix.S_IFREG:
		return c.file(dirfd, name, rel, dst)
	case unix.S_IFLNK:
		target, err := readlinkat(dirfd, name)
		if err != nil {
			return c.fail(rel, "readlink", err)
		}
		if err := os.Symlink(target, dst); err != nil {
			return c.fail(rel, "symlink", err)
		}
		return c.finish(rel, dst, &st, true)
	default: // FIFO, socket, character or block device
		if err := unix.Mknod(dst, st.Mode, int(st.Rdev)); err != nil {
			return c.fail(rel, "mknod", err)
		}
		return c.finish(rel, dst, &st, false)
	}
}

// file copies a regular file. O_NONBLOCK keeps a file swapped for a FIFO
// from blocking the open; the fstat afterwards rejects anything that is no
// longer a regular file.
func (c *copier) file(dirfd int, name, rel, dst string) error {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return c.fail(rel, "open", err)
	}
	in := os.NewFile(uintptr(fd), name)
	defer in.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return c.fail(rel, "stat", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return c.fail(rel, "open", errors.New("changed from a regular file during the copy"))
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return c.fail(rel, "create", err)
	}
	if err := copyContent(c.ctx, out, in); err != nil {
		out.Close()
		return c.fail(rel, "write", err)
	}
	if err := out.Close(); err != nil {
		return c.fail(rel, "close", err)
	}
	return c.finish(rel, dst, &st, false)
}

// finish applies owner, mode and times. The owner goes first because chown
// clears setuid/setgid bits. Changing the owner needs root; without it (unit
// tests as a normal user) the copy keeps the caller's ownership.
func (c *copier) finish(rel, dst string, st *unix.Stat_t, symlink bool) error {
	if err := unix.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil && !errors.Is(err, unix.EPERM) {
		return c.fail(rel, "chown", err)
	}
	if !symlink {
		if err := unix.Chmod(dst, st.Mode&0o7777); err != nil {
			return c.fail(rel, "chmod", err)
		}
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return c.fail(rel, "set times", err)
	}
	return nil
}

func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// copyChunk bounds how much is copied between two looks at the context.
const copyChunk = 64 << 20

// copyContent copies in to out in chunks so that a cancelled RPC stops a
// long copy. Each chunk goes through (*os.File).ReadFrom with an
// io.LimitedReader around the source file, which Go turns into
// copy_file_range: same-file-system copies stay in the kernel and reflink
// where the file system can.
func copyContent(ctx context.Context, out, in *os.File) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := out.ReadFrom(&io.LimitedReader{R: in, N: copyChunk})
		if err != nil {
			return err
		}
		if n < copyChunk {
			return nil
		}
	}
}
