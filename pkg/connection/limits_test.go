package connection

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/config"
)

// TestGetSpecialAndHugeFiles: a connection file that is a FIFO, a device
// or bigger than config.MaxFileSize fails its own connection at once with a
// precise reason; it never blocks the call or fills memory, and other
// connections keep loading.
func TestGetSpecialAndHugeFiles(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, path string)
		want  string
	}{
		{"fifo", func(t *testing.T, path string) {
			testkit.Mkfifo(t, path)
		}, "not a regular file (a named pipe, mode p"},
		{"device", func(t *testing.T, path string) {
			if err := os.Symlink("/dev/null", path); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file (a character device, mode Dc"},
		{"over the limit", func(t *testing.T, path string) {
			data := []byte(connA + "# " + strings.Repeat("x", config.MaxFileSize) + "\n")
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "larger than the 1024 KiB limit for a config file"},
	}
	for _, mode := range cacheModes {
		for _, tt := range tests {
			t.Run(mode.name+"/"+tt.name, func(t *testing.T) {
				e := newEnv(t, mode.timeout)
				e.Write("good", connA)
				tt.setup(t, e.Path("bad"))
				type result struct {
					c   *Connection
					err error
				}
				done := make(chan result, 1)
				go func() {
					c, err := e.store.Get(context.Background(), "bad")
					done <- result{c, err}
				}()
				var r result
				select {
				case r = <-done:
				case <-time.After(5 * time.Second):
					t.Fatal("Get blocked on the file")
				}
				if r.c != nil || !errors.Is(r.err, ErrBroken) {
					t.Fatalf("Get(bad) = %v, %v; want ErrBroken", r.c, r.err)
				}
				if !strings.Contains(r.err.Error(), tt.want) || !strings.Contains(r.err.Error(), filepath.Base(e.Path("bad"))) {
					t.Errorf("error %q does not contain %q and the file name", r.err, tt.want)
				}
				if got := e.endpoint("good"); got != "unix:///csi/a.sock" {
					t.Errorf("good connection: endpoint %q", got)
				}
			})
		}
	}
	// Exactly config.MaxFileSize is fine.
	e := newEnv(t, 0)
	pad := config.MaxFileSize - len(connA) - len("# \n")
	e.Write("big", connA+"# "+strings.Repeat("x", pad)+"\n")
	if got := e.endpoint("big"); got != "unix:///csi/a.sock" {
		t.Errorf("file of exactly %d bytes: endpoint %q", config.MaxFileSize, got)
	}
}
