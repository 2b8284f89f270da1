package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// burstFSSize is the size of the burst's file system image; sparse, it
// takes a few MiB of the run's disk. 15,000 pairs at concurrency 100 never
// hold more than 100 volumes at once.
const burstFSSize = 2 << 30

// burstFS returns where the burst's two local-hostpath servers keep their
// volumes: a fresh ext4 file system on a loop device, mounted under dir,
// when ptbench can make one (root, mkfs.ext4 and mount), else dir itself.
// desc says which, and why not. release unmounts it (once, however often it
// is called); call it after the servers have stopped.
//
// The burst compares two servers of the same driver, so their file system
// must not differ: the run's own disk carries the history of earlier runs
// (freed inodes that ext4 without a journal skips for minutes), which
// lands on one server's directory more than on the other's and moves the
// ratio by far more than the proxy costs (docs/performance.md).
func burstFS(dir string) (base, desc string, release func()) {
	release = func() {}
	fallback := func(why string) (string, string, func()) {
		fsType, dev := fsOf(dir)
		return dir, fmt.Sprintf("the run's directory (%s on %s): %s", fsType, dev, why), release
	}
	if os.Geteuid() != 0 {
		return fallback("not root, so no loop device")
	}
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		for _, p := range []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
			if _, serr := os.Stat(p); serr == nil {
				mkfs, err = p, nil
				break
			}
		}
	}
	if err != nil {
		return fallback("no mkfs.ext4 (Debian package e2fsprogs)")
	}
	img, mnt := filepath.Join(dir, "burstfs.img"), filepath.Join(dir, "burstfs")
	f, err := os.Create(img)
	if err == nil {
		err = f.Truncate(burstFSSize)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = os.MkdirAll(mnt, 0o755)
	}
	if err != nil {
		return fallback(err.Error())
	}
	run := func(name string, args ...string) error {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := run(mkfs, "-q", "-F", img); err != nil {
		_ = os.Remove(img)
		return fallback(err.Error())
	}
	// mount -o loop sets the loop device to clear itself on unmount.
	if err := run("mount", "-o", "loop", img, mnt); err != nil {
		_ = os.Remove(img)
		return fallback(err.Error())
	}
	released := false
	release = func() {
		if released {
			return
		}
		released = true
		if err := unix.Unmount(mnt, 0); err != nil {
			fmt.Fprintf(os.Stderr, "ptbench: unmounting %s: %v\n", mnt, err)
			return
		}
		_ = os.Remove(img)
	}
	return mnt, fmt.Sprintf("a fresh ext4 file system on a loop device (%d GiB sparse image in the run's directory)", burstFSSize>>30), release
}
