// Package testkit holds the small helpers that tests of several packages
// share: checking a gRPC status, a volume capability, writing a file,
// serving a gRPC server on a unix socket and paging through ListVolumes.
// It imports none of the project's packages, so any package's internal
// tests may use it.
package testkit

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Mkfifo makes a real FIFO at path. A writer opened on cleanup unblocks
// a reader that a regression would leave waiting for one, so such a test
// fails instead of hanging.
func Mkfifo(t testing.TB, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	t.Cleanup(func() {
		if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
}

// WantCode fails the test at once unless err is a gRPC status with code
// want, and marks it failed if the message lacks one of fragments.
func WantCode(t testing.TB, err error, want codes.Code, fragments ...string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("error %v is not a gRPC status (want %s)", err, want)
	}
	if st.Code() != want {
		t.Fatalf("code = %s (%q), want %s", st.Code(), st.Message(), want)
	}
	for _, f := range fragments {
		if !strings.Contains(st.Message(), f) {
			t.Errorf("message %q does not mention %q", st.Message(), f)
		}
	}
}

// MountCap is a mount volume capability with access mode mode and the
// given mount flags (no file system type).
func MountCap(mode csi.VolumeCapability_AccessMode_Mode, flags ...string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{MountFlags: flags}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

// RWO is MountCap(SINGLE_NODE_WRITER), the capability most tests ask for.
func RWO() *csi.VolumeCapability {
	return MountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
}

// WriteFile writes content to path with mode perm exactly (the umask
// aside), creating its parent directories; it returns path.
func WriteFile(t testing.TB, path, content string, perm os.FileMode) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil {
		t.Fatal(err)
	}
	return path
}

// ReplaceFile writes content to a temporary file beside path and renames
// it over path, as editors and config management do: a new inode.
func ReplaceFile(t testing.TB, path, content string, perm os.FileMode) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	WriteFile(t, tmp, content, perm)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// Folder is a test's connection folder: one YAML file per connection.
type Folder struct {
	t   testing.TB
	Dir string
}

// NewFolder is a Folder in a new temporary directory of t.
func NewFolder(t testing.TB) Folder { return Folder{t: t, Dir: t.TempDir()} }

// Path is the file of connection name.
func (f Folder) Path(name string) string { return filepath.Join(f.Dir, name+".yaml") }

// Write rewrites name.yaml in place (same inode).
func (f Folder) Write(name, content string) { WriteFile(f.t, f.Path(name), content, 0o600) }

// Replace renames a new name.yaml over the old one: a new inode.
func (f Folder) Replace(name, content string) { ReplaceFile(f.t, f.Path(name), content, 0o600) }

// SocketDir is a new directory for unix sockets, removed when the test
// ends. A socket path must fit in 108 bytes, which t.TempDir's (named
// after the test and its subtests) may exceed, so it is a short name
// under os.TempDir.
func SocketDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// ServeUnix serves register's services with a gRPC server on a new unix
// socket at path until the test ends; it returns the server, which the
// test may stop earlier. It may be called from any goroutine: when the
// socket cannot be made it marks the test failed and returns nil.
func ServeUnix(t testing.TB, path string, register func(*grpc.Server), opts ...grpc.ServerOption) *grpc.Server {
	t.Helper()
	s := grpc.NewServer(opts...)
	register(s)
	return Serve(t, path, s)
}

// Serve is ServeUnix for a server the caller built (the proxy's own, with
// its interceptors): it serves s on a new unix socket at path until the
// test ends and returns s, or marks the test failed and returns nil.
func Serve(t testing.TB, path string, s *grpc.Server) *grpc.Server {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Errorf("serve on %s: %v", path, err)
		return nil
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(l) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return s
}

// ListAllVolumes pages through the proxy's ListVolumes with maxEntries
// until the last page, failing the test on an error, a page over
// maxEntries, a short page that is not the last, a token that does not
// advance, or a next token for an unbounded listing (max_entries 0: the
// proxy returns every entry at once). It returns the pages.
func ListAllVolumes(ctx context.Context, t testing.TB, ctrl csi.ControllerClient, maxEntries int32) [][]*csi.ListVolumesResponse_Entry {
	t.Helper()
	var pages [][]*csi.ListVolumesResponse_Entry
	token := ""
	for {
		if len(pages) > 50 {
			t.Fatalf("max_entries %d: more than 50 pages; the token does not advance (last %q)", maxEntries, token)
		}
		resp, err := ctrl.ListVolumes(ctx, &csi.ListVolumesRequest{MaxEntries: maxEntries, StartingToken: token})
		if err != nil {
			t.Fatalf("max_entries %d, page %d (token %q): %v", maxEntries, len(pages)+1, token, err)
		}
		pages = append(pages, resp.GetEntries())
		if maxEntries > 0 && len(resp.GetEntries()) > int(maxEntries) {
			t.Errorf("max_entries %d: page %d has %d entries", maxEntries, len(pages), len(resp.GetEntries()))
		}
		if resp.GetNextToken() == "" {
			return pages
		}
		if maxEntries > 0 && len(resp.GetEntries()) < int(maxEntries) {
			t.Errorf("max_entries %d: page %d has %d entries but a next token", maxEntries, len(pages), len(resp.GetEntries()))
		}
		if maxEntries == 0 {
			t.Errorf("unbounded listing returned a next token %q", resp.GetNextToken())
		}
		token = resp.GetNextToken()
	}
}

// Volumes is every volume of pages by ID.
func Volumes(pages [][]*csi.ListVolumesResponse_Entry) map[string]*csi.Volume {
	out := map[string]*csi.Volume{}
	for _, page := range pages {
		for _, e := range page {
			out[e.GetVolume().GetVolumeId()] = e.GetVolume()
		}
	}
	return out
}
