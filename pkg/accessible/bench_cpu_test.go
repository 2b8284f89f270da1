//go:build unix

package accessible

import (
	"runtime"
	"syscall"
	"testing"
	"time"
)

// BenchmarkCreateTopologyCPU runs createTopology's four cases in turn in
// every iteration, each after a collection, and adds up the process CPU
// time each takes; it reports the ratios ptbench holds to goals
// (docs/performance.md): mapped over unmapped at 10,000 terms (at most
// 2: the map may cost a constant factor, never a factor of the terms, as
// its quadratic duplicate removal did) and 10,000 over 1,000 terms on
// each (at most 20: linear is 10). Interleaved and counted in CPU time, the
// ratios hold on a loaded machine, where wall time does not.
func BenchmarkCreateTopologyCPU(b *testing.B) {
	cases := []func(){
		createTopology(b, false, 1000), createTopology(b, false, 10000),
		createTopology(b, true, 1000), createTopology(b, true, 10000),
	}
	var cpu [4]time.Duration
	for b.Loop() {
		for i, run := range cases {
			runtime.GC()
			start := processCPU(b)
			run()
			cpu[i] += processCPU(b) - start
		}
	}
	if cpu[0] > 0 && cpu[1] > 0 && cpu[2] > 0 {
		b.ReportMetric(float64(cpu[3])/float64(cpu[1]), "mapped/unmapped")
		b.ReportMetric(float64(cpu[1])/float64(cpu[0]), "unmapped-10x/1x")
		b.ReportMetric(float64(cpu[3])/float64(cpu[2]), "mapped-10x/1x")
	}
}

// processCPU is the CPU time the process has used, user and system.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
