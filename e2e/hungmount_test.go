package e2e

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// hungMount is a FUSE file system whose lookups block until released: a
// stand-in for an NFS server gone away under a hard mount. Anything that
// stats a path below it hangs in the kernel, where no Go deadline reaches.
type hungMount struct {
	dir     string
	server  *fuse.Server
	root    *blockingRoot
	release sync.Once
}

// blockingRoot is the mount's root directory; while the mount hangs,
// Lookup blocks on every name until the hang ends, then answers ENOENT. It
// ignores the request's context on purpose: a kernel INTERRUPT must not end
// the hang, since a hard NFS mount does not end it either.
type blockingRoot struct {
	fs.Inode
	mu      sync.Mutex
	unblock chan struct{} // closed: lookups answer at once
	blocked atomic.Int64
}

var _ fs.NodeLookuper = (*blockingRoot)(nil)

func (r *blockingRoot) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	r.mu.Lock()
	unblock := r.unblock
	r.mu.Unlock()
	r.blocked.Add(1)
	defer r.blocked.Add(-1)
	<-unblock
	return nil, syscall.ENOENT
}

// hang makes later lookups block until resume.
func (m *hungMount) hang() {
	m.root.mu.Lock()
	m.root.unblock = make(chan struct{})
	m.root.mu.Unlock()
}

// resume ends the hang: blocked lookups answer ENOENT.
func (m *hungMount) resume() {
	m.root.mu.Lock()
	select {
	case <-m.root.unblock:
	default:
		close(m.root.unblock)
	}
	m.root.mu.Unlock()
}

// mountHung mounts a hungMount on dir (created if missing), hanging. It
// needs root and /dev/fuse; the cleanup unblocks and unmounts it.
func mountHung(t *testing.T, dir string) *hungMount {
	t.Helper()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	root := &blockingRoot{unblock: make(chan struct{})}
	server, err := fs.Mount(dir, root, &fs.Options{MountOptions: fuse.MountOptions{
		FsName: "pt-hung", Name: "pthung", DirectMountStrict: true,
	}})
	if err != nil {
		t.Fatalf("mount a blocking FUSE file system on %s: %v", dir, err)
	}
	m := &hungMount{dir: dir, server: server, root: root}
	t.Cleanup(m.unmount)
	return m
}

// blocked reports how many lookups are hanging now.
func (m *hungMount) blocked() int64 { return m.root.blocked.Load() }

// unmount ends every hang (blocked lookups answer ENOENT) and unmounts.
// It is safe to call more than once.
func (m *hungMount) unmount() {
	m.release.Do(func() {
		m.resume()
		if err := m.server.Unmount(); err != nil {
			// Busy: detach it; the kernel drops it once unused.
			_ = syscall.Unmount(m.dir, syscall.MNT_DETACH)
		}
		m.server.Wait()
	})
}
