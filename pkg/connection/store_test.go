package connection

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// An invalid name must be refused before any file system access: each
// invalid name below has a valid connection file it would reach if it were
// joined to the folder, so a store that looked would find it.
func TestGetInvalidName(t *testing.T) {
	root := t.TempDir()
	folder := filepath.Join(root, "connections")
	if err := os.Mkdir(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("a", 64)
	lure := map[string]string{ // file the name would reach -> name
		filepath.Join(root, "outside.yaml"):   "../outside",
		filepath.Join(folder, "...yaml"):      "..",
		filepath.Join(folder, "..yaml"):       ".",
		filepath.Join(folder, ".hidden.yaml"): ".hidden",
		filepath.Join(folder, "-dash.yaml"):   "-dash",
		filepath.Join(folder, "_u.yaml"):      "_u",
		filepath.Join(folder, "a b.yaml"):     "a b",
		filepath.Join(folder, "ünï.yaml"):     "ünï",
		filepath.Join(folder, long+".yaml"):   long,
		filepath.Join(folder, "a\\b.yaml"):    "a\\b",
		filepath.Join(folder, "a:b.yaml"):     "a:b",
		filepath.Join(folder, "a\nb.yaml"):    "a\nb",
	}
	if err := os.Mkdir(filepath.Join(folder, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	lure[filepath.Join(folder, "sub", "x.yaml")] = "sub/x"
	for file := range lure {
		if err := os.WriteFile(file, []byte(connA), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	names := []string{"", "a\x00b", "\x00", "a/", "/etc/passwd", strings.Repeat("a", 1000), "a\xffb"}
	for _, n := range lure {
		names = append(names, n)
	}

	e := newEnv(t, -1)
	e.store.src = NewFolderSource(folder) // the store reads through its source, made at NewStore
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			c, err := e.store.Get(context.Background(), name)
			if c != nil {
				t.Errorf("Get returned a connection for %q", name)
			}
			if !errors.Is(err, ErrInvalidName) {
				t.Fatalf("error %v is not ErrInvalidName", err)
			}
			if errors.Is(err, ErrNotFound) || errors.Is(err, ErrBroken) {
				t.Errorf("error %v also matches another sentinel", err)
			}
		})
	}
	if n := e.loadCount(); n != 0 {
		t.Errorf("%d files were loaded for invalid names", n)
	}
	if n := e.store.Cached(); n != 0 {
		t.Errorf("Cached() = %d after invalid names", n)
	}
}

func TestGetValidNameEdges(t *testing.T) {
	e := newEnv(t, -1)
	for _, name := range []string{"a", "A", "0", "a..b", "a.yaml", "a_b-c.d", strings.Repeat("z", 63)} {
		e.Write(name, connA)
		if got := e.endpoint(name); got != "unix:///csi/a.sock" {
			t.Errorf("%q: endpoint %q", name, got)
		}
	}
	// Names are case-sensitive, like file names.
	if _, err := e.store.Get(context.Background(), "Z"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(Z) = %v, want ErrNotFound", err)
	}
}

func TestGetNotFound(t *testing.T) {
	e := newEnv(t, -1)
	_, err := e.store.Get(context.Background(), "nfs")
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("error %v is not ErrNotFound", err)
	}
	if !strings.Contains(err.Error(), e.Path("nfs")) || !strings.Contains(err.Error(), `"nfs"`) {
		t.Errorf("error %q does not name the connection and its file", err)
	}
	if errors.Is(err, ErrBroken) || errors.Is(err, ErrInvalidName) {
		t.Errorf("error %v matches another sentinel", err)
	}

	// A folder that does not exist is the same: there is no such file.
	e.store.src = NewFolderSource(filepath.Join(e.Dir, "missing")) // the store reads through its source, made at NewStore
	if _, err := e.store.Get(context.Background(), "nfs"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing folder: %v, want ErrNotFound", err)
	}
	// Only ".yaml": "nfs.yml" is not "nfs".
	e.store.src = NewFolderSource(e.Dir) // the store reads through its source, made at NewStore
	if err := os.WriteFile(filepath.Join(e.Dir, "nfs.yml"), []byte(connA), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Get(context.Background(), "nfs"); !errors.Is(err, ErrNotFound) {
		t.Errorf("nfs.yml: %v, want ErrNotFound", err)
	}
}

// A broken file fails only its own connection, with the parse error in the
// message; fixing the file works on the next Get, whatever the cache mode.
func TestGetBroken(t *testing.T) {
	broken := []struct {
		name, content, want string
	}{
		{"invalid YAML", "driver: [csi\n", "yaml: line 1: did not find expected ',' or ']'"},
		{"invalid config", "driver: proxy\n", "driver: proxy is only valid in the main config"},
		{"empty file", "", "driver: required (csi, local-hostpath or group)"},
		{"bad endpoint", "driver: csi\ncsi:\n  endpoint: http://x\n", `csi.endpoint: "http://x": only unix:// and host:port endpoints are supported`},
	}
	for _, mode := range cacheModes {
		for _, b := range broken {
			t.Run(mode.name+"/"+b.name, func(t *testing.T) {
				e := newEnv(t, mode.timeout)
				e.Write("good", connA)
				e.Write("bad", b.content)
				for range 2 { // the second Get may come from the cache
					c, err := e.store.Get(context.Background(), "bad")
					if c != nil || !errors.Is(err, ErrBroken) {
						t.Fatalf("Get(bad) = %v, %v; want ErrBroken", c, err)
					}
					if !strings.Contains(err.Error(), b.want) || !strings.Contains(err.Error(), e.Path("bad")) {
						t.Errorf("error %q does not contain %q and the file name", err, b.want)
					}
					if got := e.endpoint("good"); got != "unix:///csi/a.sock" {
						t.Errorf("good connection: endpoint %q", got)
					}
				}
				e.Write("bad", connB)
				if got := e.endpoint("bad"); got != "unix:///csi/b.sock" {
					t.Errorf("fixed file: endpoint %q", got)
				}
			})
		}
	}
}

// An unreadable "file" (here a directory) is ErrBroken, not ErrNotFound.
func TestGetUnreadable(t *testing.T) {
	e := newEnv(t, -1)
	if err := os.Mkdir(e.Path("dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Get(context.Background(), "dir"); !errors.Is(err, ErrBroken) || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("Get(dir) = %v, want ErrBroken: is a directory", err)
	}
}

func TestList(t *testing.T) {
	e := newEnv(t, -1)
	for _, name := range []string{"b", "a", "a-b", "a_b", "a.b", "Z", "-bad", ".hidden", "ünï"} {
		e.Write(name, connA)
	}
	for _, f := range []string{"a.yml", "README", "x.yaml.bak", ".yaml"} {
		if err := os.WriteFile(filepath.Join(e.Dir, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(e.Path("dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A mounted Secret: symlinked files are listed, its ..data and
	// timestamped directory are not.
	e.secret(1, map[string]string{"secret": connA})

	got, err := e.store.List()
	if err != nil {
		t.Fatal(err)
	}
	// Connection-name order: "a" before "a-b", although "a-b.yaml" sorts
	// before "a.yaml".
	want := []string{"Z", "a", "a-b", "a.b", "a_b", "b", "secret"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	for _, name := range got {
		if _, err := e.store.Get(context.Background(), name); err != nil {
			t.Errorf("listed %q but Get fails: %v", name, err)
		}
	}

	missing := NewStore(Options{Folder: filepath.Join(e.Dir, "missing")})
	if _, err := missing.List(); err == nil {
		t.Error("List of a missing folder: no error")
	}
}

func TestWarningsAreLogged(t *testing.T) {
	e := newEnv(t, -1)
	e.Write("nfs", connA+"  endpiont: x\n")
	e.get("nfs")
	log := e.log.String()
	if !strings.Contains(log, "unknown key csi.endpiont (ignored)") || !strings.Contains(log, "connection=nfs") {
		t.Errorf("log does not warn about csi.endpiont for connection nfs:\n%s", log)
	}
}

func TestOnLoad(t *testing.T) {
	e := newEnv(t, -1)
	e.Write("nfs", connA)
	e.get("nfs")
	e.get("nfs")
	e.Replace("nfs", connB)
	e.get("nfs")
	e.Replace("nfs", "driver: nope\n")
	e.store.Get(context.Background(), "nfs")
	e.store.Get(context.Background(), "nfs")
	e.store.Get(context.Background(), "missing") // nothing to read: no load
	want := []loadEvent{
		{"nfs", false, false},
		{"nfs", true, false},
		{"nfs", true, true},
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if diff := cmp.Diff(want, e.loads, cmp.AllowUnexported(loadEvent{})); diff != "" {
		t.Errorf("OnLoad calls (-want +got):\n%s", diff)
	}
}
