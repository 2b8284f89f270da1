// Package gctune keeps the Go garbage collector's heap goal a fixed
// headroom above the live heap, instead of the runtime's default of twice
// the live heap with a 4 MiB floor.
//
// The proxy's live heap is small (a few MiB plus its cached connections),
// while every proxied call allocates a few KiB that die with the call. With
// GOGC=100 the collector then runs every 4 MiB of allocation — dozens of
// cycles a second when pods start in bulk — and each cycle's fixed costs
// (stack and global scanning, the background mark worker, assists, sweeping)
// were the largest single item of the proxy's CPU profile under load
// (docs/performance.md). A headroom H makes the collector run every H bytes
// of allocation while the live heap is small, at the price of up to H more
// resident memory; once the live heap exceeds H (thousands of cached
// connections), the percentage stays at the runtime's default of 100 and
// nothing changes.
//
// The tuner re-arms itself after every collection with runtime.AddCleanup
// on a sentinel object (no goroutine, no timer) and sets the percentage
// with debug.SetGCPercent. A GOMEMLIMIT still applies on top. When the
// operator sets GOGC, the tuner is not started (Enabled).
package gctune

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// heapMinimum is the runtime's smallest heap goal at GOGC=100; it scales
// with the percentage (runtime/mgcpacer.go).
const heapMinimum = 4 << 20

// maxPercent bounds the percentage for a nearly empty heap.
const maxPercent = 10000

// Percent returns the GC percentage that puts the heap goal at about
// live+headroom: live*(1+p/100) = live+headroom, without letting the
// runtime's heap minimum (4 MiB*p/100) lift the goal above that. It is
// never below the default 100.
func Percent(live, headroom uint64) int {
	if headroom == 0 {
		return 100
	}
	target := live + headroom
	p := uint64(maxPercent)
	if live > 0 {
		p = min(p, headroom*100/live)
	}
	p = min(p, target*100/heapMinimum)
	return int(max(p, 100))
}

// Enabled reports whether a tuner should run: not when the operator chose
// the collector's pace with GOGC.
func Enabled() bool { return os.Getenv("GOGC") == "" }

// Tuner adjusts the GC percentage after every collection.
type Tuner struct {
	headroom uint64
	stopped  atomic.Bool
	// previous is the percentage before Start, restored by Stop.
	previous int
	percent  atomic.Int64
	// onChange, if set, is told each new percentage (logging).
	onChange func(live uint64, percent int)

	mu     sync.Mutex // serializes tune (cleanups run one at a time, but Start also tunes)
	sample [1]metrics.Sample
}

// sentinel is the object whose collection signals the end of a GC cycle.
// The pointer keeps it out of the tiny allocator, whose blocks may hold
// several objects and so be freed later than any one of them.
type sentinel struct {
	_ *byte
	_ [16]byte
}

// Start begins tuning for headroom bytes; onChange may be nil. Stop ends
// it and restores the previous percentage.
func Start(headroom uint64, onChange func(live uint64, percent int)) *Tuner {
	t := &Tuner{headroom: headroom, onChange: onChange, previous: debug.SetGCPercent(100)}
	t.sample[0].Name = "/gc/heap/live:bytes"
	t.tune() // replaces the 100 at once
	t.arm()
	return t
}

// Percent is the percentage the tuner set last.
func (t *Tuner) Percent() int { return int(t.percent.Load()) }

// Stop ends tuning and restores the percentage in force before Start. The
// pending sentinel is simply not re-armed.
func (t *Tuner) Stop() {
	if t.stopped.Swap(true) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	debug.SetGCPercent(t.previous)
}

func (t *Tuner) arm() {
	runtime.AddCleanup(new(sentinel), func(t *Tuner) {
		if t.stopped.Load() {
			return
		}
		t.tune()
		t.arm()
	}, t)
}

// tune sets the percentage for the live heap the last cycle marked. It
// changes it only when it moves by more than an eighth, so a steady heap
// does not touch the runtime every cycle.
func (t *Tuner) tune() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped.Load() {
		return
	}
	metrics.Read(t.sample[:])
	var live uint64
	if t.sample[0].Value.Kind() == metrics.KindUint64 {
		live = t.sample[0].Value.Uint64()
	}
	p := Percent(live, t.headroom)
	cur := t.percent.Load()
	if d := int64(p) - cur; cur != 0 && d < cur/8 && -d < cur/8 {
		return
	}
	t.percent.Store(int64(p))
	debug.SetGCPercent(p)
	if t.onChange != nil {
		t.onChange(live, p)
	}
}
