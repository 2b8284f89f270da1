package connection

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/democratic-csi/proxy-topology/pkg/ids"
)

// Source is where connection files come from: a folder (FolderSource, the
// default) or a Kubernetes Secret (pkg/kube).
type Source interface {
	// Stat returns the version of <name>.yaml: equal versions promise equal
	// content, so the store reads the file only when the version changes.
	// A version with an UntrustedMark promises nothing (the store reads the
	// content on every call) but names the same file version as any other
	// version with the same text before the mark. The error wraps
	// fs.ErrNotExist when there is no such file.
	Stat(name string) (version string, err error)
	// Read returns the content of <name>.yaml.
	Read(name string) ([]byte, error)
	// List returns the connection names present, sorted; names that are
	// not valid connection names are left out.
	List() ([]string, error)
	// Describe names the file in messages, e.g. "/mnt/connections/x.yaml".
	Describe(name string) string
}

// UntrustedMark ends the trusted part of a version (see Source.Stat).
const UntrustedMark = "~"

// sameFileVersion reports whether two versions name the same file version,
// trusted or not.
func sameFileVersion(a, b string) bool {
	a, _, _ = strings.Cut(a, UntrustedMark)
	b, _, _ = strings.Cut(b, UntrustedMark)
	return a == b
}

// FolderSource reads <Dir>/<name>.yaml.
type FolderSource struct {
	Dir string
	// now is the clock compared with file times; nil means time.Now.
	now func() time.Time
	seq atomic.Uint64
}

// NewFolderSource returns a source for dir.
func NewFolderSource(dir string) *FolderSource { return &FolderSource{Dir: dir} }

func (f *FolderSource) path(name string) string { return filepath.Join(f.Dir, name+".yaml") }

// Describe returns the file path.
func (f *FolderSource) Describe(name string) string { return f.path(name) }

// String names the folder.
func (f *FolderSource) String() string { return "folder " + f.Dir }

// MaxFileSize bounds a connection file. A Kubernetes Secret holds at most
// 1 MiB in all, and a file name pointed by mistake at a log, a device or a
// FIFO must fail its connection, not fill the proxy's memory or block it.
const MaxFileSize = 1 << 20

// Read reads the file if it is a regular file of at most MaxFileSize.
func (f *FolderSource) Read(name string) ([]byte, error) {
	path := f.path(name)
	// O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
	// writer forever. It changes nothing for a regular file.
	file, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil {
		return nil, err
	}
	switch {
	case fi.IsDir():
		return nil, &fs.PathError{Op: "read", Path: path, Err: syscall.EISDIR}
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a regular file (mode %v)", path, fi.Mode().Type())
	}
	// Size from Stat is not trusted: the file may grow while it is read.
	data, err := io.ReadAll(io.LimitReader(file, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%s is larger than the %d KiB limit for a connection file", path, MaxFileSize>>10)
	}
	return data, nil
}

// racyWindow bounds the timestamp granularity trusted: a file whose ctime
// is at least this far in the past cannot be rewritten without its stamp
// changing. Closer to its last change, a same-size rewrite on a file system
// with coarse timestamps (a clock tick, or a whole second) may leave inode,
// size, mtime and ctime all as they were — git's "racy clean" problem.
const racyWindow = 2 * time.Second

// Stat versions a file by inode, size, mtime and ctime, so one stat(2)
// detects an edit in place, a rename over the file and the symlink swap
// Kubernetes uses to update a mounted Secret. A file changed within
// racyWindow gets a version that never repeats, so the store reads it (and
// compares its bytes) on every call until its stamp can be trusted.
func (f *FolderSource) Stat(name string) (string, error) {
	fi, err := os.Stat(f.path(name))
	if err != nil {
		return "", err
	}
	st := stampOf(fi)
	v := st.String()
	now := time.Now
	if f.now != nil {
		now = f.now
	}
	if now().Sub(st.changed()) < racyWindow {
		v += UntrustedMark + "racy" + strconv.FormatUint(f.seq.Add(1), 10)
	}
	return v, nil
}

// List returns the valid connection names of *.yaml files, sorted.
func (f *FolderSource) List() ([]string, error) {
	des, err := os.ReadDir(f.Dir)
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

// stamp identifies a file version without reading it.
type stamp struct {
	ino, size        uint64
	mtime, ctime     int64
	mtimeNs, ctimeNs int64
}

func (st stamp) String() string {
	b := make([]byte, 0, 64)
	b = strconv.AppendUint(b, st.ino, 16)
	b = append(b, ':')
	b = strconv.AppendUint(b, st.size, 16)
	b = append(b, ':')
	b = strconv.AppendInt(b, st.mtimeNs, 16)
	b = append(b, ':')
	b = strconv.AppendInt(b, st.ctime, 16)
	b = append(b, '.')
	b = strconv.AppendInt(b, st.ctimeNs, 16)
	return string(b)
}

// changed is when the file last changed: its ctime, which no one can set
// back, or its mtime where there is no ctime.
func (st stamp) changed() time.Time {
	if st.ctime != 0 || st.ctimeNs != 0 {
		return time.Unix(st.ctime, st.ctimeNs)
	}
	return time.Unix(0, st.mtimeNs)
}

func stampOf(fi fs.FileInfo) stamp {
	st := stamp{size: uint64(fi.Size()), mtimeNs: fi.ModTime().UnixNano()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = sys.Ino
		st.ctime, st.ctimeNs = sys.Ctim.Sec, sys.Ctim.Nsec
		st.mtime = sys.Mtim.Sec
	}
	return st
}
