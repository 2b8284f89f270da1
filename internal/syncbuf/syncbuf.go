// Package syncbuf is a bytes.Buffer safe for concurrent use: tests point
// the loggers of servers and their handlers at one, and read it while they
// still write.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer with a lock; the zero value is ready to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
