package hostpath

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Durability (docs/reliability.md §10). A change that a call acknowledges
// is on stable storage before the call returns: a create renames its data
// and its record into place and then syncs the record file, the new
// directory and both parents. Concurrent creates sync independently; the
// file system joins their syncs into its own commits.
//
// Paths that are idempotent anyway are not synced at all: a delete whose
// effect a power loss undoes leaves a whole volume (record and data) that
// the CO's retry, or an administrator, deletes again; a kill -9 loses
// nothing, since the page cache survives the process.

// syncer runs the store's fsyncs; trace, when set, sees each one (the
// durability tests).
type syncer struct {
	trace func(op, path string)
}

// commit makes files (open, already renamed into place; commit closes
// them) and the directory entries in dirs durable: files first, then dirs
// in the order given.
func (g *syncer) commit(files []*os.File, dirs ...string) error {
	var errs []error
	for _, f := range files {
		errs = append(errs, g.fsyncFile(f), f.Close())
	}
	for _, d := range dirs {
		errs = append(errs, g.fsyncDir(d))
	}
	return errors.Join(errs...)
}

func (g *syncer) fsyncFile(f *os.File) error {
	g.note("fsync", f.Name())
	return f.Sync()
}

func (g *syncer) fsyncDir(dir string) error {
	g.note("fsync", dir)
	return syncDir(dir)
}

// syncTree fsyncs every regular file and directory under root, children
// before their parents: a copy, before it is published. Symlinks and
// special files live in their directory's entries.
func (g *syncer) syncTree(root string) error {
	g.note("synctree", root)
	var dirs []string
	err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case de.IsDir():
			dirs = append(dirs, p)
		case de.Type().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			err = f.Sync()
			f.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syncDir(dirs[i]); err != nil {
			return err
		}
	}
	return nil
}

// syncFS flushes the whole file system holding dir (syncfs(2)): once, when
// a Driver starts where another one died (recover).
func (g *syncer) syncFS(dir string) error {
	g.note("syncfs", dir)
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return unix.Syncfs(int(d.Fd()))
}

func (g *syncer) note(op, path string) {
	if g.trace != nil {
		g.trace(op, path)
	}
}
