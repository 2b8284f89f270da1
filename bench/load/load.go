// Package load drives calls at a fixed concurrency and summarises their
// latencies. Paths are measured in interleaved rounds (A B C, B C A, …) so
// that drift in a shared machine's load lands on every path alike.
package load

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Call issues call number i (0-based, unique within a chunk) and reports
// its error.
type Call func(ctx context.Context, i int) error

// Sample is what a path collected over all of its chunks.
type Sample struct {
	// Latencies holds one duration per call, in nanoseconds.
	Latencies []int64
	// Wall is the summed wall time of the chunks, for throughput.
	Wall time.Duration
	// CPU is the CPU time the path's server process spent in the chunks,
	// when the path can tell.
	CPU time.Duration
}

// Add appends another sample.
func (s *Sample) Add(o Sample) {
	s.Latencies = append(s.Latencies, o.Latencies...)
	s.Wall += o.Wall
	s.CPU += o.CPU
}

// Run issues n calls from conc goroutines and returns their latencies. It
// stops at the first error.
func Run(ctx context.Context, conc, n int, call Call) (Sample, error) {
	lat := make([]int64, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				t := time.Now()
				err := call(ctx, i)
				lat[i] = int64(time.Since(t))
				if err != nil {
					once.Do(func() { firstErr = fmt.Errorf("call %d: %w", i, err); cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	return Sample{Latencies: lat, Wall: time.Since(start)}, firstErr
}

// Path is one way of reaching the same work (direct, raw forwarder, …).
type Path struct {
	Name string
	// Call gets a counter unique across all rounds of this path, so
	// requests that need distinct names never repeat one.
	Call Call
	// CPU, if set, returns the CPU time used so far by the process that
	// serves this path.
	CPU func() time.Duration
}

// Rounds measures every path for rounds rounds of n calls at concurrency
// conc, rotating the order each round; one unrecorded chunk per path warms
// connections and caches first. The result is keyed by path name.
func Rounds(ctx context.Context, paths []Path, rounds, conc, n int) (map[string]*Sample, error) {
	out := make(map[string]*Sample, len(paths))
	offset := make([]int, len(paths))
	chunk := func(p int) (Sample, error) {
		base := offset[p]
		offset[p] += n
		var cpu0 time.Duration
		if paths[p].CPU != nil {
			cpu0 = paths[p].CPU()
		}
		s, err := Run(ctx, conc, n, func(ctx context.Context, i int) error { return paths[p].Call(ctx, base+i) })
		if paths[p].CPU != nil {
			s.CPU = paths[p].CPU() - cpu0
		}
		if err != nil {
			err = fmt.Errorf("%s: %w", paths[p].Name, err)
		}
		return s, err
	}
	for p := range paths {
		out[paths[p].Name] = &Sample{}
		if _, err := chunk(p); err != nil {
			return nil, err
		}
	}
	for r := 0; r < rounds; r++ {
		for k := range paths {
			p := (r + k) % len(paths)
			s, err := chunk(p)
			if err != nil {
				return nil, err
			}
			out[paths[p].Name].Add(s)
		}
	}
	return out, nil
}

// Stats summarises a sample.
type Stats struct {
	N          int     `json:"n"`
	P50us      float64 `json:"p50_us"`
	P99us      float64 `json:"p99_us"`
	Throughput float64 `json:"throughput_per_s"`
	// CPUus is the serving process's CPU time per call, when known.
	CPUus float64 `json:"server_cpu_us_per_call,omitempty"`
}

// Summarize computes percentiles (nearest rank) and throughput.
func (s *Sample) Summarize() Stats {
	if len(s.Latencies) == 0 {
		return Stats{}
	}
	sorted := slices.Clone(s.Latencies)
	slices.Sort(sorted)
	st := Stats{
		N:     len(sorted),
		P50us: float64(Percentile(sorted, 50)) / 1e3,
		P99us: float64(Percentile(sorted, 99)) / 1e3,
	}
	if s.Wall > 0 {
		st.Throughput = float64(len(sorted)) / s.Wall.Seconds()
	}
	st.CPUus = float64(s.CPU) / 1e3 / float64(len(sorted))
	return st
}

// Percentile returns the nearest-rank p-th percentile of sorted values.
func Percentile(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	rank = max(0, min(rank, len(sorted)-1))
	return sorted[rank]
}
