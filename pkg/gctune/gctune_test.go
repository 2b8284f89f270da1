package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mi = 1 << 20
	for _, tc := range []struct {
		name           string
		live, headroom uint64
		want           int
	}{
		{"off", 3 * mi, 0, 100},
		{"live larger than headroom keeps the default", 64 * mi, 16 * mi, 100},
		{"live equal to headroom", 16 * mi, 16 * mi, 100},
		// 3 MiB live + 16 MiB: 16/3 gives 533, but the runtime's heap
		// minimum (4 MiB*p/100) must stay at or below 19 MiB: 475.
		{"heap minimum caps it", 3 * mi, 16 * mi, 475},
		{"headroom over live decides", 12 * mi, 24 * mi, 200},
		{"empty heap", 0, 16 * mi, 400},
		{"huge headroom, empty heap", 0, 1 << 40, maxPercent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percent(tc.live, tc.headroom); got != tc.want {
				t.Fatalf("Percent(%d, %d) = %d, want %d", tc.live, tc.headroom, got, tc.want)
			}
		})
	}
}

// The goal Percent gives is never below live+headroom by more than the
// integer rounding, and never above it unless the default 100 is.
func TestPercentGoal(t *testing.T) {
	const mi = 1 << 20
	for live := uint64(0); live <= 80*mi; live += mi / 2 {
		for _, h := range []uint64{mi, 8 * mi, 16 * mi, 64 * mi} {
			p := uint64(Percent(live, h))
			goal := max(live+live*p/100, heapMinimum*p/100)
			def := max(2*live, heapMinimum)
			switch {
			case goal > live+h && goal > def:
				t.Fatalf("live %d headroom %d: p=%d gives goal %d above both %d and the default %d", live, h, p, goal, live+h, def)
			case goal+live/100+heapMinimum/100 < min(live+h, def) && p < maxPercent:
				t.Fatalf("live %d headroom %d: p=%d gives goal %d, under %d", live, h, p, goal, live+h)
			}
		}
	}
}

func gogc() uint64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// Start sets the percentage at once and after collections, and Stop puts
// the previous one back.
func TestTunerFollowsCollections(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)

	changes := make(chan int, 100)
	tu := Start(64<<20, func(_ uint64, p int) {
		select {
		case changes <- p:
		default:
		}
	})
	if got := gogc(); got <= 100 {
		t.Fatalf("after Start: GOGC %d, want above 100 for a 64 MiB headroom", got)
	}
	if got := uint64(tu.Percent()); got != gogc() {
		t.Fatalf("Percent() = %d, runtime has %d", got, gogc())
	}

	// Grow the live heap well past the headroom: the tuner must fall
	// back to 100 after a collection.
	live := make([][]byte, 0, 160)
	for range 160 {
		live = append(live, make([]byte, 1<<20))
	}
	deadline := time.Now().Add(10 * time.Second)
	for gogc() != 100 {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC still %d with %d MiB live and a 64 MiB headroom", gogc(), len(live))
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	runtime.KeepAlive(live)

	// Release it: the percentage rises again.
	live = nil
	runtime.KeepAlive(live)
	deadline = time.Now().Add(10 * time.Second)
	for gogc() <= 100 {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC stayed %d after the live heap shrank", gogc())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}

	debug.SetGCPercent(150)
	tu.Stop()
	if got := gogc(); got != 100 {
		t.Fatalf("after Stop: GOGC %d, want the 100 in force before Start", got)
	}
	// Stopped: collections change nothing any more.
	debug.SetGCPercent(120)
	runtime.GC()
	runtime.GC()
	time.Sleep(50 * time.Millisecond)
	if got := gogc(); got != 120 {
		t.Fatalf("a stopped tuner changed GOGC to %d", got)
	}
}
