package hostpath

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Durability (docs/reliability.md §10). A change that a call acknowledges
// is on stable storage before the call returns: a create renames its data
// and its record into place and then syncs the record file, the new
// directory and both parents. The syncs run at once, not in turn: the
// kernel may write any of those changes back before its fsync anyway, so
// recovery never relies on their order, only on all of them having
// finished before the call returns.
//
// Paths that are idempotent anyway are not synced at all: a delete whose
// effect a power loss undoes leaves a whole volume (record and data) that
// the CO's retry, or an administrator, deletes again; a kill -9 loses
// nothing, since the page cache survives the process.

// syncer runs the store's fsyncs; trace, when set, sees each one (the
// durability tests). Every fsync and directory operation is counted in
// Stats.
type syncer struct {
	trace func(op, path string)
	// fail, set by tests only, makes the journal's fdatasync of path fail
	// with the error it returns.
	fail func(path string) error
}

// Stats counts, for every Driver of the process, the fsync(2) and
// fdatasync(2) calls (Fsyncs) and the directory operations (DirOps:
// mkdir, rename, create and remove of an entry) of the driver's state,
// for `make bench` and the metrics.
type Stats struct {
	Fsyncs, DirOps uint64
}

var stats struct{ fsyncs, dirOps atomic.Uint64 }

// Counters returns the process's totals so far.
func Counters() Stats {
	return Stats{Fsyncs: stats.fsyncs.Load(), DirOps: stats.dirOps.Load()}
}

// fdatasync makes f's content (and its size) durable: the journal's sync.
func (g *syncer) fdatasync(f *os.File) error {
	g.note("fsync", f.Name())
	if g.fail != nil {
		if err := g.fail(f.Name()); err != nil {
			return err
		}
	}
	return unix.Fdatasync(int(f.Fd()))
}

// commit makes files (open, already renamed into place; commit closes
// them) and the directory entries in dirs durable. It returns when every
// sync has finished, with all their errors.
func (g *syncer) commit(files []*os.File, dirs ...string) error {
	syncs := make([]func() error, 0, len(files)+len(dirs))
	for _, f := range files {
		syncs = append(syncs, func() error { return g.fsyncFile(f) })
	}
	for _, d := range dirs {
		syncs = append(syncs, func() error { return g.fsyncDir(d) })
	}
	errs := make([]error, len(syncs), len(syncs)+len(files))
	var wg sync.WaitGroup
	for i, s := range syncs[1:] {
		wg.Go(func() { errs[i+1] = s() })
	}
	if len(syncs) > 0 {
		errs[0] = syncs[0]()
	}
	wg.Wait()
	for _, f := range files {
		errs = append(errs, f.Close())
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
	switch op {
	case "fsync", "syncfs":
		stats.fsyncs.Add(1)
	case "rename", "mkdir", "create", "remove":
		stats.dirOps.Add(1)
	}
	if g.trace != nil {
		g.trace(op, path)
	}
}
