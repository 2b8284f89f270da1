package hostpath

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// Durability (docs/reliability.md §10). A change that a call acknowledges
// is on stable storage before the call returns, but the fsyncs that make
// it so are shared: a create renames its data and its record into place
// and then joins a group commit, one round of fsyncs that serves every
// create waiting at that moment. On a journalling file system the first
// fsync of a round commits the journal transaction that holds all of the
// round's renames, and the rest find nothing left to write, so concurrent
// calls pay for one commit instead of queueing for one each.
//
// Paths that are idempotent anyway are not synced at all: a delete whose
// effect a power loss undoes leaves a whole volume (record and data) that
// the CO's retry, or an administrator, deletes again; a kill -9 loses
// nothing, since the page cache survives the process.

// groupSync collects fsync work and runs it in rounds. While one round
// runs, arriving callers join the next; when the round ends, one of them
// runs the next round for all of them.
type groupSync struct {
	trace func(op, path string)

	mu   sync.Mutex
	next *syncRound // collecting; nil when nobody waits
	busy bool       // a round is running
}

type syncRound struct {
	files []*os.File
	dirs  []string
	seen  map[string]bool
	done  chan struct{}
	err   error
}

func (r *syncRound) add(files []*os.File, dirs []string) {
	r.files = append(r.files, files...)
	for _, d := range dirs {
		if !r.seen[d] {
			r.seen[d] = true
			r.dirs = append(r.dirs, d)
		}
	}
}

// commit makes files (open, already renamed into place; commit closes
// them) and the directory entries in dirs durable, and returns once a
// round that includes them has ended. Directories are synced in the order
// first given, files before directories.
func (g *groupSync) commit(files []*os.File, dirs ...string) error {
	g.mu.Lock()
	r := g.next
	if r == nil {
		r = &syncRound{seen: map[string]bool{}, done: make(chan struct{})}
		g.next = r
	}
	r.add(files, dirs)
	if g.busy {
		// The round in progress may have started before our renames
		// were done; ours is the next one, run by whoever finishes first.
		g.mu.Unlock()
		<-r.done
		return r.err
	}
	g.busy = true
	g.next = nil
	g.mu.Unlock()
	g.run(r)
	return r.err
}

// run runs round r and then hands over: if callers joined a next round
// meanwhile, a new goroutine runs it, so this caller returns at once.
func (g *groupSync) run(r *syncRound) {
	var errs []error
	for _, f := range r.files {
		errs = append(errs, g.fsyncFile(f))
		errs = append(errs, f.Close())
	}
	for _, d := range r.dirs {
		errs = append(errs, g.fsyncDir(d))
	}
	r.err = errors.Join(errs...)
	close(r.done)

	g.mu.Lock()
	next := g.next
	g.next = nil
	g.busy = next != nil
	g.mu.Unlock()
	if next != nil {
		go g.run(next)
	}
}

func (g *groupSync) fsyncFile(f *os.File) error {
	g.note("fsync", f.Name())
	return f.Sync()
}

func (g *groupSync) fsyncDir(dir string) error {
	g.note("fsync", dir)
	return syncDir(dir)
}

// syncTree fsyncs every regular file and directory under root, children
// before their parents: a copy, before it is published. Symlinks and
// special files live in their directory's entries.
func (g *groupSync) syncTree(root string) error {
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
func (g *groupSync) syncFS(dir string) error {
	g.note("syncfs", dir)
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return unix.Syncfs(int(d.Fd()))
}

func (g *groupSync) note(op, path string) {
	if g.trace != nil {
		g.trace(op, path)
	}
}
