package csi

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	pendpoint "github.com/democratic-csi/proxy-topology/pkg/endpoint"
)

// DefaultEndpoint is where the socket lives unless --csi-endpoint says
// otherwise; its directory should hold nothing else (deployment seed).
const DefaultEndpoint = "unix:///run/csi/csi.sock"

// Listen opens the CSI endpoint: unix:///path (or unix:/path), or
// tcp://host:port (tcp://:port: every interface) for tests. For a unix socket the parent directory is
// created (0750), a stale socket is removed only if nothing answers on it,
// and the socket is made 0660 so only the owner and its group can call it.
func Listen(endpoint string) (net.Listener, error) {
	ep, err := pendpoint.Parse(endpoint, pendpoint.Listen)
	if err != nil {
		return nil, fmt.Errorf("--csi-endpoint %w", err)
	}
	if ep.Scheme == pendpoint.TCP {
		return net.Listen("tcp", ep.Address)
	}
	path := ep.Address
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("--csi-endpoint %q: %w", endpoint, err)
	}
	if err := removeStale(path); err != nil {
		return nil, fmt.Errorf("--csi-endpoint %q: %w", endpoint, err)
	}
	// The umask makes bind(2) create the socket 0660 at once, so there is
	// no moment in which it has the process default; Chmod then only
	// confirms it. The umask is process-wide, which is fine here: this runs
	// once at start-up before anything else creates files.
	old := syscall.Umask(0o117)
	l, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("--csi-endpoint %q: %w", endpoint, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		l.Close()
		return nil, fmt.Errorf("--csi-endpoint %q: %w", endpoint, err)
	}
	return l, nil
}

func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket; refusing to remove it", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("%s is in use by another process", path)
	}
	return os.Remove(path)
}
