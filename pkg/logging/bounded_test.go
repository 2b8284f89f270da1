package logging

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
)

// TestLinesBounded (issue 38, probe 7): a 100 KB connection name or a
// 120 KB volume ID was logged verbatim, so a 4 MiB request made a 4 MiB
// line. Every string and error a line carries is now cut with its length
// stated, in both formats, and a value with a newline stays in its field.
func TestLinesBounded(t *testing.T) {
	long := strings.Repeat("a", 100000)
	huge := &csi.CreateVolumeRequest{Name: strings.Repeat("n", 4<<20)}
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			log, err := New(&buf, format, "debug")
			if err != nil {
				t.Fatal(err)
			}
			log.Info("rpc", "connection", long, "error", errors.New("upstream says "+long), "id", "v:a/b\nforged line")
			log.Debug("request", "request", Sanitized{Msg: huge})
			log.Info("rpc", "connection", Caller(long))
			lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
			if len(lines) != 3 {
				t.Fatalf("%d lines, want 3 (a newline left its field?):\n%.2000s", len(lines), buf.String())
			}
			for i, max := range []int{3*MaxValue + 200, MaxDump + 200, 400} {
				if len(lines[i]) > max {
					t.Errorf("line %d is %d bytes, want at most %d", i, len(lines[i]), max)
				}
			}
			for _, want := range []string{"(100000 bytes)", "(100014 bytes)"} {
				if !strings.Contains(lines[0], want) {
					t.Errorf("line 0 does not state the length %s: %.300s", want, lines[0])
				}
			}
			if !strings.Contains(lines[1], "bytes)") || !strings.Contains(lines[2], "aaa…(100000 bytes)") {
				t.Errorf("lengths not stated:\n%.300s\n%.300s", lines[1], lines[2])
			}
		})
	}
}
