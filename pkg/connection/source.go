package connection

import (
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/democratic-csi/proxy-topology/pkg/config"
	"github.com/democratic-csi/proxy-topology/pkg/ids"
)

// Source is where connection files come from: a folder (FolderSource, the
// default) or a Kubernetes Secret (pkg/kube).
type Source interface {
	// Stat returns the version of <name>.yaml: equal versions promise equal
	// content, so the store reads the file only when the version changes.
	// now is the time of the call, for sources whose versions depend on
	// it (FolderSource's racy window); the store reads its clock once per
	// Get and hands it down. The error wraps fs.ErrNotExist when there is
	// no such file.
	Stat(name string, now time.Time) (Version, error)
	// Read returns the content of <name>.yaml.
	Read(name string) ([]byte, error)
	// List returns the connection names present, sorted; names that are
	// not valid connection names are left out.
	List() ([]string, error)
	// Describe names the file in messages, e.g. "/mnt/connections/x.yaml".
	Describe(name string) string
}

// Version identifies one version of a connection file. It is compared
// with ==, on every Get, so it is a small struct rather than a string to
// format.
type Version struct {
	// Key is the version for sources that name versions themselves, e.g.
	// by a hash of the content (the Secret source).
	Key string
	// file is FolderSource's stamp of the file.
	file stamp
	// Untrusted, when not 0, makes the version promise nothing: the store
	// reads the content on every call. A source numbers its untrusted
	// versions so that no two are equal; with Untrusted set back to 0 the
	// version still names the same file version as the trusted one (see
	// sameFileVersion).
	Untrusted uint64
}

// sameFileVersion reports whether two versions name the same file version,
// trusted or not.
func sameFileVersion(a, b Version) bool {
	a.Untrusted, b.Untrusted = 0, 0
	return a == b
}

// FolderSource reads <dir>/<name>.yaml. Make one with NewFolderSource.
type FolderSource struct {
	dir string
	// prefix is dir cleaned, with a trailing "/" unless it is empty (the
	// current directory).
	prefix string
	seq    atomic.Uint64
}

// NewFolderSource returns a source for dir.
func NewFolderSource(dir string) *FolderSource {
	f := &FolderSource{dir: dir}
	switch clean := filepath.Clean(dir); clean {
	case ".":
		f.prefix = ""
	case "/":
		f.prefix = "/"
	default:
		f.prefix = clean + "/"
	}
	return f
}

// path is filepath.Join(f.dir, name+".yaml") for a valid connection name,
// built by concatenation because Stat runs on every call: a valid name has
// no "/" and does not start with a dot, so joining cleans nothing in it.
// Invalid names never get here (the store refuses them first).
func (f *FolderSource) path(name string) string { return f.prefix + name + ".yaml" }

// Describe returns the file path.
func (f *FolderSource) Describe(name string) string { return f.path(name) }

// String names the folder.
func (f *FolderSource) String() string { return "folder " + f.dir }

// Read reads the file through config.ReadFile: a regular file of at most
// config.MaxFileSize, never blocking on a FIFO.
func (f *FolderSource) Read(name string) ([]byte, error) { return config.ReadFile(f.path(name)) }

// racyWindow bounds the timestamp granularity trusted: a file whose ctime
// is at least this far in the past cannot be rewritten without its stamp
// changing. Closer to its last change, a same-size rewrite on a file system
// with coarse timestamps (a clock tick, or a whole second) may leave inode,
// size, mtime and ctime all as they were — git's "racy clean" problem.
const racyWindow = 2 * time.Second

// Stat versions a file by inode, size, mtime and ctime, so one stat(2)
// detects an edit in place, a rename over the file and the symlink swap
// Kubernetes uses to update a mounted Secret. A file changed within
// racyWindow of now gets a version that never repeats, so the store reads
// it (and compares its bytes) on every call until its stamp can be trusted.
func (f *FolderSource) Stat(name string, now time.Time) (Version, error) {
	var sys syscall.Stat_t
	if err := f.stat(name, &sys); err != nil {
		return Version{}, err
	}
	v := Version{file: stampOf(&sys)}
	if now.Sub(v.file.changed()) < racyWindow {
		v.Untrusted = f.seq.Add(1)
	}
	return v, nil
}

// stat is os.Stat without the os.FileInfo it allocates: stat(2), following
// symlinks, retried on EINTR (which the runtime's preemption signals can
// cause on network file systems), with the error os.Stat returns.
func (f *FolderSource) stat(name string, sys *syscall.Stat_t) error {
	path := f.path(name)
	for {
		err := syscall.Stat(path, sys)
		if err == nil {
			return nil
		}
		if err != syscall.EINTR {
			return &fs.PathError{Op: "stat", Path: path, Err: err}
		}
	}
}

// List returns the valid connection names of *.yaml files, sorted.
func (f *FolderSource) List() ([]string, error) {
	des, err := os.ReadDir(f.dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, de := range des {
		n := de.Name()
		if filepath.Ext(n) != ".yaml" || de.IsDir() {
			continue
		}
		n = n[:len(n)-len(".yaml")]
		if ids.ValidateConnectionName(n) == nil {
			names = append(names, n)
		}
	}
	// os.ReadDir sorts file names, where "a-b.yaml" < "a.yaml"; callers
	// need connection-name order.
	sort.Strings(names)
	return names, nil
}

// stamp identifies a file version without reading it. mtimeNs is the
// whole mtime in nanoseconds; ctime and ctimeNs are the seconds and
// nanoseconds of the ctime.
type stamp struct {
	ino, size      uint64
	mtimeNs        int64
	ctime, ctimeNs int64
}

// changed is when the file last changed: its ctime, which no one can set
// back, or its mtime where there is no ctime.
func (st stamp) changed() time.Time {
	if st.ctime != 0 || st.ctimeNs != 0 {
		return time.Unix(st.ctime, st.ctimeNs)
	}
	return time.Unix(0, st.mtimeNs)
}

func stampOf(sys *syscall.Stat_t) stamp {
	return stamp{
		ino:     uint64(sys.Ino),
		size:    uint64(sys.Size),
		mtimeNs: sys.Mtim.Nano(),
		ctime:   int64(sys.Ctim.Sec),
		ctimeNs: int64(sys.Ctim.Nsec),
	}
}
