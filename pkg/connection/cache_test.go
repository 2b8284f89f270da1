package connection

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/democratic-csi/proxy-topology/pkg/ids"
)

var cacheModes = []struct {
	name    string
	timeout time.Duration
}{
	{"no cache", 0},
	{"forever", -1},
	{"10m", 10 * time.Minute},
}

// sameSizeRewrite writes content over name in place and puts the old mtime
// back: size, inode and mtime are unchanged, only ctime moves.
func (e *env) sameSizeRewrite(name, content string) {
	e.t.Helper()
	fi, err := os.Stat(e.Path(name))
	if err != nil {
		e.t.Fatal(err)
	}
	if fi.Size() != int64(len(content)) {
		e.t.Fatalf("sameSizeRewrite: %d bytes over %d", len(content), fi.Size())
	}
	e.Write(name, content)
	if err := os.Chtimes(e.Path(name), fi.ModTime(), fi.ModTime()); err != nil {
		e.t.Fatal(err)
	}
	after, err := os.Stat(e.Path(name))
	if err != nil {
		e.t.Fatal(err)
	}
	if !after.ModTime().Equal(fi.ModTime()) || after.Size() != fi.Size() {
		e.t.Fatal("sameSizeRewrite changed size or mtime")
	}
}

// With cacheTimeout 0 every Get reads the file: even a change that keeps
// inode, size and mtime is seen. The same bytes keep their *Connection and
// its upstream clients (nothing is parsed or dialled again); other bytes
// replace it, and its clients are released.
func TestNoCacheRereads(t *testing.T) {
	e := newEnv(t, 0)
	e.Write("nfs", connA)
	first := e.get("nfs")
	if got := e.get("nfs"); got != first {
		t.Error("cache 0 made a new *Connection for the same bytes; its clients would be made again")
	}
	e.sameSizeRewrite("nfs", connB)
	if got := e.endpoint("nfs"); got != "unix:///csi/b.sock" {
		t.Errorf("endpoint %q after a same-size, same-mtime rewrite, want b.sock", got)
	}
	if n := e.store.Cached(); n != 0 {
		t.Errorf("Cached() = %d with cache 0", n)
	}
	if n := e.loadCount(); n != 3 {
		t.Errorf("%d loads for 3 Gets with cache 0: each read counts", n)
	}
	// a.sock's attachment (the registry's clients) went with the version
	// that used it.
	if !closed(first) || e.open.Load() != 1 {
		t.Errorf("after the rewrite: first version's attachment closed %t, %d open; want closed, 1 open", closed(first), e.open.Load())
	}
}

// With -1 or N an unchanged file gives the same *Connection, parsed once.
func TestCacheKeepsConnection(t *testing.T) {
	for _, timeout := range []time.Duration{-1, 10 * time.Minute} {
		t.Run(timeout.String(), func(t *testing.T) {
			e := newEnv(t, timeout)
			e.Write("nfs", connA)
			first := e.get("nfs")
			for range 5 {
				e.clock.Step(time.Minute)
				if got := e.get("nfs"); got != first {
					t.Fatal("an unchanged file gave a new *Connection")
				}
			}
			if n := e.loadCount(); n != 1 {
				t.Errorf("%d loads of an unchanged file, want 1", n)
			}
			if n := e.store.Cached(); n != 1 {
				t.Errorf("Cached() = %d, want 1", n)
			}
		})
	}
}

// Any change to the file's stamp (inode, size, mtime, ctime) makes the
// next Get read it again. A new content loads a new connection; the same
// content (chmod, touch, a rename of identical bytes) keeps the connection
// it has, so metadata-only changes cost one read and nothing else.
func TestCacheReloadsOnChange(t *testing.T) {
	tests := []struct {
		name   string
		change func(e *env)
		// newContent: the change is to connB; otherwise the content stays
		// connA and the *Connection must be kept.
		newContent bool
	}{
		{"rewrite, new size", func(e *env) { e.Write("nfs", connA+"  timeout: 5s\n") }, true},
		{"rewrite, same size and mtime", func(e *env) { e.sameSizeRewrite("nfs", connB) }, true},
		{"rename over it", func(e *env) { e.Replace("nfs", connB) }, true},
		{"delete and recreate", func(e *env) {
			if err := os.Remove(e.Path("nfs")); err != nil {
				e.t.Fatal(err)
			}
			e.Write("nfs", connB)
		}, true},
		{"chmod", func(e *env) {
			if err := os.Chmod(e.Path("nfs"), 0o640); err != nil {
				e.t.Fatal(err)
			}
		}, false},
		{"touch", func(e *env) {
			later := time.Now().Add(time.Hour)
			if err := os.Chtimes(e.Path("nfs"), later, later); err != nil {
				e.t.Fatal(err)
			}
		}, false},
		{"rename of identical bytes", func(e *env) { e.Replace("nfs", connA) }, false},
	}
	for _, timeout := range []time.Duration{-1, 10 * time.Minute} {
		for _, tt := range tests {
			t.Run(timeout.String()+"/"+tt.name, func(t *testing.T) {
				e := newEnv(t, timeout)
				e.Write("nfs", connA)
				first := e.get("nfs")
				tt.change(e)
				got := e.get("nfs")
				if !tt.newContent {
					if got != first {
						t.Error("same content after a metadata change: want the same *Connection")
					}
					return
				}
				if got == first {
					t.Fatal("changed file: still the cached *Connection")
				}
				if got.Config.CSI.Endpoint == first.Config.CSI.Endpoint && got.Config.CSI.Timeout == first.Config.CSI.Timeout {
					t.Errorf("changed file: config unchanged %+v", got.Config.CSI)
				}
				if again := e.get("nfs"); again != got {
					t.Error("the reloaded connection is not cached")
				}
			})
		}
	}
}

// The kubelet updates a mounted Secret by renaming a new "..data" symlink
// over the old one; name.yaml itself is never written.
func TestCacheSecretSymlinkSwap(t *testing.T) {
	for _, mode := range cacheModes {
		t.Run(mode.name, func(t *testing.T) {
			e := newEnv(t, mode.timeout)
			e.secret(1, map[string]string{"nfs": connA, "other": connA})
			if got := e.endpoint("nfs"); got != "unix:///csi/a.sock" {
				t.Fatalf("endpoint %q", got)
			}
			other := e.get("other")
			e.secret(2, map[string]string{"nfs": connB, "other": connA})
			if got := e.endpoint("nfs"); got != "unix:///csi/b.sock" {
				t.Errorf("after the swap: endpoint %q, want b.sock", got)
			}
			if got := e.get("other"); mode.timeout != 0 && got != other {
				t.Error("other's content did not change: want the same *Connection")
			}
			// A key removed from the Secret disappears with the next swap.
			if err := os.Remove(e.Path("other")); err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.Get(context.Background(), "other"); !errors.Is(err, ErrNotFound) {
				t.Errorf("removed key: %v, want ErrNotFound", err)
			}
		})
	}
}

func TestCacheDeletedFile(t *testing.T) {
	for _, mode := range cacheModes {
		t.Run(mode.name, func(t *testing.T) {
			e := newEnv(t, mode.timeout)
			e.Write("nfs", connA)
			e.Write("keep", connA)
			e.get("nfs")
			e.get("keep")
			if err := os.Remove(e.Path("nfs")); err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.Get(context.Background(), "nfs"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("deleted file: %v, want ErrNotFound", err)
			}
			want := 1
			if mode.timeout == 0 {
				want = 0
			}
			if n := e.store.Cached(); n != want {
				t.Errorf("Cached() = %d after the delete, want %d", n, want)
			}
			e.Write("nfs", connB)
			if got := e.endpoint("nfs"); got != "unix:///csi/b.sock" {
				t.Errorf("recreated: endpoint %q", got)
			}
		})
	}
}

// cacheTimeout N drops a connection unused for N, lazily, on a later Get;
// connections used meanwhile stay.
func TestCacheTimeoutDropsUnused(t *testing.T) {
	const ttl = 10 * time.Minute
	e := newEnv(t, ttl)
	for _, n := range []string{"a", "b", "c"} {
		e.Write(n, connA)
	}
	a, b := e.get("a"), e.get("b")
	e.get("c")
	if n := e.store.Cached(); n != 3 {
		t.Fatalf("Cached() = %d, want 3", n)
	}

	e.clock.Step(6 * time.Minute)
	if e.get("b") != b {
		t.Error("b reloaded while cached")
	}
	e.clock.Step(5 * time.Minute) // a, c: unused for 11m; b for 5m
	// The sweep is lazy, but Cached (the connections_cached gauge) counts
	// only what has not expired.
	if n := e.store.Cached(); n != 1 {
		t.Errorf("Cached() = %d before any Get, want 1 (b): a and c expired", n)
	}
	e.get("c") // sweeps a (c is loaded again right after)
	if n := e.store.Cached(); n != 2 {
		t.Errorf("Cached() = %d after 11m, want 2 (b, c)", n)
	}
	if e.get("b") != b {
		t.Error("b, used 5m ago, was dropped")
	}

	// A dropped connection let its attachment go, and loads again on its
	// next use.
	loads := e.loadCount()
	got := e.get("a")
	if got == a || !closed(a) || closed(got) {
		t.Error("dropped a: want its attachment closed, and a new *Connection")
	}
	if e.loadCount() != loads+1 {
		t.Error("dropped a was not read again")
	}

	// Exactly N unused is not yet "unused for longer than N".
	e.clock.Step(ttl)
	e.get("b")
	if n := e.store.Cached(); n != 3 {
		t.Errorf("Cached() = %d at exactly N, want 3", n)
	}
	e.clock.Step(2 * time.Minute)
	e.get("b")
	if n := e.store.Cached(); n != 1 {
		t.Errorf("Cached() = %d, want 1 (b)", n)
	}
}

func TestCacheForeverNeverDrops(t *testing.T) {
	e := newEnv(t, -1)
	e.Write("a", connA)
	e.Write("b", connA)
	a := e.get("a")
	e.clock.Step(10 * 365 * 24 * time.Hour)
	e.get("b")
	if e.get("a") != a || e.store.Cached() != 2 {
		t.Errorf("cache -1 dropped a connection (Cached() = %d)", e.store.Cached())
	}
}

// Ten million expired, unknown-to-the-store names would be a leak: entries
// exist only for names that have (or had) a file.
func TestCacheHoldsOnlyExistingFiles(t *testing.T) {
	e := newEnv(t, -1)
	for i := range 100 {
		e.store.Get(context.Background(), fmt.Sprintf("missing-%d", i))
	}
	if n := e.store.Cached(); n != 0 {
		t.Errorf("Cached() = %d after Gets of missing files", n)
	}
}

// A file system with coarse timestamps (one clock tick, or a whole second)
// can rewrite a file with the same size without changing any of inode,
// size, mtime or ctime. FolderSource must not hand out a trustworthy
// version that close to the file's last change: each Stat then gets a
// version of its own, until the file is old enough.
func TestFolderSourceRacyVersion(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "nfs.yaml"), []byte(connA), 0o644); err != nil {
		t.Fatal(err)
	}
	src := NewFolderSource(dir)
	v1, err1 := src.Stat("nfs", time.Now())
	v2, err2 := src.Stat("nfs", time.Now())
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if v1 == v2 {
		t.Errorf("a file changed just now got the same version twice (%+v): a same-size rewrite could go unseen", v1)
	}
	later := time.Now().Add(racyWindow + time.Second)
	v3, _ := src.Stat("nfs", later)
	v4, _ := src.Stat("nfs", later)
	if v3 != v4 {
		t.Errorf("an old file's versions differ (%+v, %+v): every Get would read it", v3, v4)
	}
	if _, err := src.Stat("missing", time.Now()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat(missing) = %v, want fs.ErrNotExist", err)
	}
}

// fakeSource serves connection files from memory with versions the test
// sets, to show what the store does with a version alone.
type fakeSource struct {
	mu      sync.Mutex
	files   map[string]string
	version map[string]string
	reads   int
}

func (f *fakeSource) Stat(name string, _ time.Time) (Version, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.version[name]
	if !ok {
		return Version{}, fs.ErrNotExist
	}
	return Version{Key: v}, nil
}

func (f *fakeSource) Read(name string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	return []byte(f.files[name]), nil
}

func (f *fakeSource) List() ([]string, error)     { return []string{"nfs"}, nil }
func (f *fakeSource) Describe(name string) string { return "fake " + name }

// The store trusts a version: same version, no read; new version with the
// same bytes, same *Connection and no load.
func TestStoreTrustsSourceVersion(t *testing.T) {
	src := &fakeSource{files: map[string]string{"nfs": connA}, version: map[string]string{"nfs": "1"}}
	loads := 0
	store := NewStore(Options{
		Source: src, CacheTimeout: -1,
		Log:    slog.New(slog.DiscardHandler),
		OnLoad: func(string, bool, error) { loads++ },
	})
	first, err := store.Get(context.Background(), "nfs")
	if err != nil {
		t.Fatal(err)
	}
	src.files["nfs"] = connB // content changes, version does not
	if got, _ := store.Get(context.Background(), "nfs"); got != first || src.reads != 1 {
		t.Errorf("same version: got a new connection or read again (reads=%d)", src.reads)
	}
	src.version["nfs"] = "2" // new version, new content
	second, _ := store.Get(context.Background(), "nfs")
	if second == first || second.Config.CSI.Endpoint != "unix:///csi/b.sock" || second.File != "fake nfs" {
		t.Errorf("new version: got endpoint %q file %q", second.Config.CSI.Endpoint, second.File)
	}
	src.version["nfs"] = "3" // new version, same content
	if got, _ := store.Get(context.Background(), "nfs"); got != second || loads != 2 {
		t.Errorf("same bytes under a new version: new connection or load (loads=%d)", loads)
	}
	delete(src.version, "nfs")
	if _, err := store.Get(context.Background(), "nfs"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "fake nfs") {
		t.Errorf("missing: %v", err)
	}
}

func TestStampChanged(t *testing.T) {
	ctime := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	st := stamp{ctime: ctime.Unix(), ctimeNs: int64(ctime.Nanosecond()), mtimeNs: 1}
	if got := st.changed(); !got.Equal(ctime) {
		t.Errorf("changed() = %v, want the ctime %v", got, ctime)
	}
	if got := (stamp{mtimeNs: 42}).changed(); !got.Equal(time.Unix(0, 42)) {
		t.Errorf("without ctime, changed() = %v, want the mtime", got)
	}
	var sys syscall.Stat_t
	if err := syscall.Stat(t.TempDir(), &sys); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(stampOf(&sys).changed()); d < 0 || d > time.Minute {
		t.Errorf("a new directory changed %v ago", d)
	}
}

// 32 goroutines Get while the file is replaced over and over: every Get
// returns one of the two versions, never an error, and the last version
// wins once writes stop. Run with -race.
func TestConcurrentGet(t *testing.T) {
	for _, mode := range cacheModes {
		t.Run(mode.name, func(t *testing.T) {
			e := newEnv(t, mode.timeout)
			e.Write("nfs", connA)
			e.Write("other", connA)

			stop := make(chan struct{})
			var writer sync.WaitGroup
			writer.Add(1)
			go func() {
				defer writer.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					content := connA
					if i%2 == 1 {
						content = connB
					}
					tmp := filepath.Join(e.Dir, fmt.Sprintf(".nfs.%d", i))
					if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
						t.Error(err)
						return
					}
					if err := os.Rename(tmp, e.Path("nfs")); err != nil {
						t.Error(err)
						return
					}
					e.clock.Step(time.Second)
				}
			}()

			var readers sync.WaitGroup
			for range 32 {
				readers.Add(1)
				go func() {
					defer readers.Done()
					for range 100 {
						for _, name := range []string{"nfs", "other"} {
							c, err := e.store.Get(context.Background(), name)
							if err != nil {
								t.Errorf("Get(%s): %v", name, err)
								return
							}
							e.attach(c)
							ep := c.Config.CSI.Endpoint
							c.Release()
							if ep != "unix:///csi/a.sock" && ep != "unix:///csi/b.sock" {
								t.Errorf("Get(%s): endpoint %q", name, ep)
								return
							}
						}
						_ = e.store.Cached()
					}
				}()
			}
			readers.Wait()
			close(stop)
			writer.Wait()

			e.Replace("nfs", connB)
			if got := e.endpoint("nfs"); got != "unix:///csi/b.sock" {
				t.Errorf("after the writes: endpoint %q, want b.sock", got)
			}
			// Every version let go closed its attachment: nfs's and
			// other's remain (with cache 0, those of the last bytes read).
			if n := e.open.Load(); n != 2 {
				t.Errorf("%d attachments open, want 2", n)
			}
		})
	}
}

// FolderSource builds its paths by concatenation; for every valid name
// they must be what filepath.Join makes, which messages have always shown.
func TestFolderSourcePath(t *testing.T) {
	dirs := []string{"", ".", "./", "/", "//", "/mnt/connections", "/mnt/connections/", "/mnt//x/./y/../connections", "rel", "./rel/", "..", "../up"}
	names := []string{"a", "A", "0", "nfs", "a..b", "a.yaml", "a_b-c.d", "z.", strings.Repeat("z", 63)}
	for _, name := range names {
		if err := ids.ValidateConnectionName(name); err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range dirs {
		src := NewFolderSource(dir)
		for _, name := range names {
			want := filepath.Join(dir, name+".yaml")
			if got := src.Describe(name); got != want {
				t.Errorf("NewFolderSource(%q).Describe(%q) = %q, want %q", dir, name, got, want)
			}
		}
	}
}

// TestEditHandsOverAttachment: a new version of a file keeps the version
// it replaced until it has an attachment of its own, so the registry's
// clients of an edit that names the same upstream are handed over rather
// than closed and made again; a version that does not load lets the
// previous one go at once.
func TestEditHandsOverAttachment(t *testing.T) {
	e := newEnv(t, -1)
	e.Write("nfs", connA)
	first := e.get("nfs")
	e.Replace("nfs", connB)
	c, err := e.store.Get(context.Background(), "nfs")
	if err != nil {
		t.Fatal(err)
	}
	if closed(first) {
		t.Error("the first version's attachment closed before the new version had one")
	}
	e.attach(c)
	if !closed(first) {
		t.Error("the first version's attachment is still open after the new version got one")
	}
	c.Release()
	e.Replace("nfs", "driver: nope\n")
	if _, err := e.store.Get(context.Background(), "nfs"); !errors.Is(err, ErrBroken) {
		t.Fatalf("Get of a broken edit: %v, want ErrBroken", err)
	}
	if !closed(c) || e.open.Load() != 0 {
		t.Errorf("after a broken edit: second version's attachment closed %t, %d open; want closed, none open", closed(c), e.open.Load())
	}
}
