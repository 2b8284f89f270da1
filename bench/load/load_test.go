package load

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	sorted := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tt := range []struct {
		p    float64
		want int64
	}{{50, 5}, {99, 10}, {100, 10}, {10, 1}, {0, 1}, {91, 10}, {90, 9}} {
		if got := Percentile(sorted, tt.p); got != tt.want {
			t.Errorf("Percentile(%v) = %d, want %d", tt.p, got, tt.want)
		}
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("Percentile(nil) = %d", got)
	}
}

func TestRunCallsEachIndexOnce(t *testing.T) {
	var mu sync.Mutex
	seen := map[int]int{}
	s, err := Run(context.Background(), 8, 1000, func(_ context.Context, i int) error {
		mu.Lock()
		seen[i]++
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Latencies) != 1000 || len(seen) != 1000 {
		t.Fatalf("%d latencies, %d distinct calls; want 1000", len(s.Latencies), len(seen))
	}
	for i, n := range seen {
		if n != 1 || i < 0 || i >= 1000 {
			t.Fatalf("call %d made %d times", i, n)
		}
	}
}

func TestRunStopsAtFirstError(t *testing.T) {
	boom := errors.New("boom")
	_, err := Run(context.Background(), 4, 100, func(_ context.Context, i int) error {
		if i == 10 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
}

// Rounds interleaves the paths, rotating the order, after one warm-up
// chunk each, and gives every path distinct call numbers.
func TestRoundsInterleaves(t *testing.T) {
	var mu sync.Mutex
	var order []string
	indexes := map[string]map[int]bool{}
	path := func(name string) Path {
		indexes[name] = map[int]bool{}
		return Path{Name: name, Call: func(_ context.Context, i int) error {
			mu.Lock()
			defer mu.Unlock()
			if len(order) == 0 || order[len(order)-1] != name {
				order = append(order, name)
			}
			if indexes[name][i] {
				t.Errorf("%s: call %d repeated", name, i)
			}
			indexes[name][i] = true
			return nil
		}, CPU: func() time.Duration { return 0 }}
	}
	got, err := Rounds(context.Background(), []Path{path("a"), path("b"), path("c")}, 3, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a", "b", "c", "a", "b", "c", "b", "c", "a", "c", "a", "b"}
	if len(order) != len(want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("order %v, want %v", order, want)
		}
	}
	for _, name := range []string{"a", "b", "c"} {
		if n := len(got[name].Latencies); n != 6 {
			t.Errorf("%s: %d recorded calls, want 6 (the warm-up is not recorded)", name, n)
		}
	}
}

func TestSummarize(t *testing.T) {
	s := Sample{Latencies: []int64{4000, 1000, 3000, 2000}, Wall: time.Second, CPU: 400 * time.Microsecond}
	st := s.Summarize()
	if st.N != 4 || st.P50us != 2 || st.P99us != 4 || st.Throughput != 4 || st.CPUus != 100 {
		t.Fatalf("Summarize = %+v", st)
	}
}
