package config

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// MaxFileSize bounds the main config and a connection file. A Kubernetes
// Secret or ConfigMap holds at most 1 MiB in all, and a path pointed by
// mistake at a log, a device or a FIFO must fail with a clear error, not
// fill the memory of the process or block it.
const MaxFileSize = 1 << 20

// ReadFile reads a config file (the main config or a connection file) for
// serve, check and the topology dry run alike, so they agree on what is
// readable: a regular file, or a symlink to one, of at most MaxFileSize.
// A FIFO, a device, a socket or a directory is refused without reading,
// and reading stops past the limit, so a FIFO never blocks and /dev/zero
// never fills memory. Every error is an *fs.PathError naming the file
// (errors.Is(err, fs.ErrNotExist) holds for a missing one).
func ReadFile(path string) ([]byte, error) {
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
	if !fi.Mode().IsRegular() {
		if fi.IsDir() {
			return nil, &fs.PathError{Op: "read", Path: path, Err: syscall.EISDIR}
		}
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("not a regular file (%s, mode %v)", fileKind(fi.Mode()), fi.Mode().Type())}
	}
	// Size from Stat is not trusted: the file may grow while it is read.
	data, err := io.ReadAll(io.LimitReader(file, MaxFileSize+1))
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	if len(data) > MaxFileSize {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("larger than the %d KiB limit for a config file", MaxFileSize>>10)}
	}
	return data, nil
}

// fileKind names the type of a file that is not regular, for messages.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "a special file"
}
