//go:build unix

package nodetopology

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
)

// A FIFO with no writer would block open(2) forever; Gather must refuse it
// instead of hanging node registration.
func TestGatherFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	e := mustCompile(t, zoneRules(Rule{TopologyKey: "zone", Source: SourceFile, File: fifo}))
	got := Gather(context.Background(), e, "n1", nil).Files[fifo]
	if got.Err == nil || got.Err.Error() != "not a regular file (mode p---------)" {
		t.Errorf("FIFO = %+v, want a not-a-regular-file error", got)
	}
}
