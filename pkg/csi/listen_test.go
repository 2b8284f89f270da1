package csi_test

import (
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
)

func TestListenCreatesSocket(t *testing.T) {
	for _, prefix := range []string{"unix://", "unix:"} {
		t.Run(prefix, func(t *testing.T) {
			path := filepath.Join(testkit.SocketDir(t), "new", "dir", "csi.sock")
			l, err := pcsi.Listen(prefix + path)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			fi, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Type() != fs.ModeSocket {
				t.Errorf("%s is %v, want a socket", path, fi.Mode())
			}
			if perm := fi.Mode().Perm(); perm != 0o660 {
				t.Errorf("socket mode %o, want 660", perm)
			}
			dir, err := os.Stat(filepath.Dir(path))
			if err != nil {
				t.Fatal(err)
			}
			if perm := dir.Mode().Perm(); perm&0o007 != 0 {
				t.Errorf("parent directory mode %o is open to others", perm)
			}
			c, err := net.Dial("unix", path)
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			c.Close()
		})
	}
}

func TestListenRefusesRegularFile(t *testing.T) {
	path := filepath.Join(testkit.SocketDir(t), "csi.sock")
	if err := os.WriteFile(path, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := pcsi.Listen("unix://" + path)
	if err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("got %v, want a refusal saying it is not a socket", err)
	}
	if data, err := os.ReadFile(path); err != nil || string(data) != "precious" {
		t.Errorf("file was touched: %q, %v", data, err)
	}
}

func TestListenRemovesStaleSocket(t *testing.T) {
	path := filepath.Join(testkit.SocketDir(t), "csi.sock")
	old, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	// A crashed process leaves its socket file behind.
	old.(*net.UnixListener).SetUnlinkOnClose(false)
	old.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("stale socket not left behind: %v", err)
	}
	l, err := pcsi.Listen("unix://" + path)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}

func TestListenRefusesLiveSocket(t *testing.T) {
	path := filepath.Join(testkit.SocketDir(t), "csi.sock")
	live, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := live.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, err = pcsi.Listen("unix://" + path)
	if err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("got %v, want a refusal saying the socket is in use", err)
	}
	live.Close()
	<-done
}

func TestListenEndpoints(t *testing.T) {
	l, err := pcsi.Listen("tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	for _, ep := range []string{"unix://relative/csi.sock", "http://x", "/abs/csi.sock", ""} {
		if l, err := pcsi.Listen(ep); err == nil {
			l.Close()
			t.Errorf("Listen(%q) succeeded", ep)
		} else if !strings.Contains(err.Error(), "--csi-endpoint") {
			t.Errorf("Listen(%q): %v does not name the flag", ep, err)
		}
	}
}
