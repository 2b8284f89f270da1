package main

import (
	"os"
	"strings"
	"testing"
)

func TestParseBench(t *testing.T) {
	out := `goos: linux
pkg: github.com/democratic-csi/proxy-topology/pkg/nodetopology
BenchmarkEvaluate-2   	    7004	    294278 ns/op	   34676 B/op	     445 allocs/op
PASS
pkg: github.com/democratic-csi/proxy-topology/pkg/accessible
BenchmarkDecide-2   	   20878	     80158.5 ns/op	   12616 B/op	      51 allocs/op
`
	got := parseBench(out)
	want := []Micro{
		{Package: "github.com/democratic-csi/proxy-topology/pkg/nodetopology", Name: "BenchmarkEvaluate", NsPerOp: 294278, BytesPerOp: 34676, AllocsPerOp: 445},
		{Package: "github.com/democratic-csi/proxy-topology/pkg/accessible", Name: "BenchmarkDecide", NsPerOp: 80158.5, BytesPerOp: 12616, AllocsPerOp: 51},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("got %+v, want %+v", got[i], want[i])
		}
	}
}

func TestTargetLine(t *testing.T) {
	for _, tt := range []struct {
		t    Target
		want string
	}{
		{target("a_ratio", 1.2345, "", "<=", 1.25), "target a_ratio: 1.234 (goal <= 1.250) ok"},
		{target("a_ratio", 1.26, "", "<=", 1.25), "target a_ratio: 1.260 (goal <= 1.250) MISS"},
		{target("tput", 0.79, "", ">=", 0.8), "target tput: 0.790 (goal >= 0.800) MISS"},
		{target("rss", 20.5, "MiB", "<=", 40), "target rss: 20.50 MiB (goal <= 40.00 MiB) ok"},
	} {
		if got := tt.t.Line(); got != tt.want {
			t.Errorf("Line() = %q, want %q", got, tt.want)
		}
	}
}

// statusKiB reads the test's own /proc status: the peak is at least the
// current size, and a field that is not there is an error naming it.
func TestStatusKiB(t *testing.T) {
	pid := os.Getpid()
	rss, err := statusKiB(pid, "VmRSS")
	if err != nil || rss <= 0 {
		t.Fatalf("VmRSS = %d, %v", rss, err)
	}
	hwm, err := statusKiB(pid, "VmHWM")
	if err != nil || hwm < rss {
		t.Errorf("VmHWM = %d, %v; want at least VmRSS %d", hwm, err, rss)
	}
	if _, err := statusKiB(pid, "VmNothing"); err == nil || !strings.Contains(err.Error(), "VmNothing") {
		t.Errorf("statusKiB(VmNothing) = %v, want an error naming the field", err)
	}
}
