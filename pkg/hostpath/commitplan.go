package hostpath

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// How many fsyncs a create needs depends on the file system under
// BasePath (docs/reliability.md §10, "one commit on ext4 with a journal").
//
// In general a create syncs its record file and both parent directories
// (volumes/ and meta/volumes/). On ext4 with a journal and without fast
// commits one fsync of the record file is enough, because:
//
//   - both renames of a create (data, then record) and the record's own
//     inode change are metadata, journalled in jbd2 transactions; a handle
//     always joins the running transaction, so the data's rename is in
//     the same transaction as the record's rename or an earlier one;
//   - ext4_rename marks the renamed inode dirty in the rename's handle
//     (its ctime), which records that transaction in the inode's
//     i_sync_tid (ext4_do_update_inode → ext4_update_inode_fsync_trans);
//   - fsync of a regular file writes its data, then waits for the commit
//     of the transaction in i_sync_tid (fs/ext4/fsync.c ext4_fsync_journal
//     → ext4_fc_commit, which without JOURNAL_FAST_COMMIT is
//     jbd2_complete_transaction); jbd2 commits transactions in order and
//     recovery replays them in order, so every earlier transaction is
//     durable too: both renames and the new directory's mkdir.
//
// fsync of a directory on such a file system is ext4_force_commit: it
// commits whatever transaction is running, so on a busy disk each of the
// two directory syncs was one more journal commit, waited for in turn.
//
// With fast commits (the fast_commit feature) a file's fsync may write
// only that inode's changes, and without a journal (ext4 with
// ^has_journal, ext2) fsync writes the file and its parent's blocks and
// nothing orders the two renames: both keep the general path. So does
// every other file system, and anything this probe cannot read.

// commitPlan says how a create's renames are made durable.
type commitPlan struct {
	// recordOnly: one fsync of the record file covers both renames.
	recordOnly bool
	// why is the evidence, for the log.
	why string
}

// ext4 superblock fields (Documentation/filesystems/ext4/super.rst): the
// superblock starts 1024 bytes into the device.
const (
	ext4SuperOffset      = 1024
	ext4MagicOffset      = 0x38
	ext4CompatOffset     = 0x5C
	ext4Magic            = 0xEF53
	ext4CompatHasJournal = 0x4
	ext4CompatFastCommit = 0x400
)

// probeCommitPlan reads what decideCommitPlan needs about the file system
// holding dir: its statfs magic, its device's ext4 mount options
// (/proc/fs/ext4/<device>/options) and the compat features of its
// superblock (read from /dev/<device>: root, and the device visible).
func probeCommitPlan(dir string) commitPlan {
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		return commitPlan{why: fmt.Sprintf("statfs %s: %v", dir, err)}
	}
	if sfs.Type != unix.EXT4_SUPER_MAGIC {
		return decideCommitPlan(int64(sfs.Type), "", "", nil, nil)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return commitPlan{why: fmt.Sprintf("stat %s: %v", dir, err)}
	}
	dev, err := blockDeviceName(unix.Major(st.Dev), unix.Minor(st.Dev))
	if err != nil {
		return commitPlan{why: "ext4 on an unknown device: " + err.Error()}
	}
	opts, err := os.ReadFile(filepath.Join("/proc/fs/ext4", dev, "options"))
	if err != nil {
		return commitPlan{why: fmt.Sprintf("ext4 on %s: %v", dev, err)}
	}
	sb, sbErr := readSuperblock(filepath.Join("/dev", dev))
	return decideCommitPlan(int64(sfs.Type), dev, string(opts), sb, sbErr)
}

// decideCommitPlan is the rule, a pure function of what probeCommitPlan
// read: ext4 (the magic), a journal with ordered or journalled data (the
// mount options: without a journal ext4 shows no data= mode), and a
// superblock that says has_journal and not fast_commit (the mount options
// show fast commits only in kernels built with CONFIG_EXT4_DEBUG).
func decideCommitPlan(magic int64, dev, options string, sb []byte, sbErr error) commitPlan {
	if magic != unix.EXT4_SUPER_MAGIC {
		return commitPlan{why: fmt.Sprintf("not ext4 (file system magic 0x%x)", magic)}
	}
	mode := ""
	for _, o := range strings.Fields(strings.ReplaceAll(options, ",", " ")) {
		if m, ok := strings.CutPrefix(o, "data="); ok {
			mode = m
		}
	}
	switch mode {
	case "ordered", "journal":
	case "":
		return commitPlan{why: fmt.Sprintf("ext4 on %s without a journal (no data= mode in /proc/fs/ext4/%s/options)", dev, dev)}
	default:
		return commitPlan{why: fmt.Sprintf("ext4 on %s with data=%s", dev, mode)}
	}
	if sbErr != nil {
		return commitPlan{why: fmt.Sprintf("ext4 on %s, data=%s, superblock unreadable (fast_commit unknown): %v", dev, mode, sbErr)}
	}
	if len(sb) < ext4CompatOffset+4 || binary.LittleEndian.Uint16(sb[ext4MagicOffset:]) != ext4Magic {
		return commitPlan{why: fmt.Sprintf("ext4 on %s: /dev/%s holds no ext4 superblock", dev, dev)}
	}
	compat := binary.LittleEndian.Uint32(sb[ext4CompatOffset:])
	switch {
	case compat&ext4CompatHasJournal == 0:
		return commitPlan{why: fmt.Sprintf("ext4 on %s: the superblock has no journal", dev)}
	case compat&ext4CompatFastCommit != 0:
		return commitPlan{why: fmt.Sprintf("ext4 on %s with fast_commit", dev)}
	}
	return commitPlan{recordOnly: true, why: fmt.Sprintf("ext4 on %s with a journal, data=%s, no fast_commit", dev, mode)}
}

// blockDeviceName is the kernel's name of the block device major:minor
// (sda1, vda, dm-0, loop0): its /proc/fs/ext4 and /dev name.
func blockDeviceName(major, minor uint32) (string, error) {
	uevent, err := os.ReadFile(fmt.Sprintf("/sys/dev/block/%d:%d/uevent", major, minor))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(uevent), "\n") {
		if name, ok := strings.CutPrefix(line, "DEVNAME="); ok && name != "" && !strings.Contains(name, "..") {
			return name, nil
		}
	}
	return "", fmt.Errorf("no DEVNAME for block device %d:%d", major, minor)
}

func readSuperblock(dev string) ([]byte, error) {
	f, err := os.Open(dev)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sb := make([]byte, 1024)
	if _, err := f.ReadAt(sb, ext4SuperOffset); err != nil {
		return nil, err
	}
	return sb, nil
}
