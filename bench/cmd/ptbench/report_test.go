package main

import (
	"context"
	"encoding/json"
	"maps"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/democratic-csi/proxy-topology/bench/load"
	"github.com/democratic-csi/proxy-topology/pkg/config"
	"github.com/democratic-csi/proxy-topology/pkg/nodetopology"
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
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("got %+v, want %+v", got[i], want[i])
		}
	}
}

func TestTargetLine(t *testing.T) {
	for _, tt := range []struct {
		t    Target
		want string
	}{
		{target("a_ratio", 1.0945, "", "<=", 1.10), "target a_ratio: 1.095 (goal <= 1.100) ok"},
		{target("a_ratio", 1.26, "", "<=", 1.10), "target a_ratio: 1.260 (goal <= 1.100) MISS"},
		{target("tput", 0.89, "", ">=", 0.9), "target tput: 0.890 (goal >= 0.900) MISS"},
		{target("rss", 20.5, "MiB", "<=", 30), "target rss: 20.50 MiB (goal <= 30.00 MiB) ok"},
		{target("burst_errors", 0, "errors", "<=", 0), "target burst_errors: 0 errors (goal <= 0 errors) ok"},
		{target("burst_errors", 3, "errors", "<=", 0), "target burst_errors: 3 errors (goal <= 0 errors) MISS"},
		{target("skipped", ratio(1, 0), "", "<=", 1.10), "target skipped: not measured (goal <= 1.100) MISS"},
		{reported("raw_ratio", 1.3), "reported raw_ratio: 1.300 (no goal)"},
	} {
		if got := tt.t.Line(); got != tt.want {
			t.Errorf("Line() = %q, want %q", got, tt.want)
		}
	}
}

// results.json keeps a goal of 0 and has no goal for a reported value.
func TestTargetJSON(t *testing.T) {
	for _, tt := range []struct {
		t    Target
		want string
	}{
		{target("burst_errors", 0, "errors", "<=", 0), `{"name":"burst_errors","value":0,"unit":"errors","op":"\u003c=","goal":0,"ok":true}`},
		{reported("raw_ratio", 1.5), `{"name":"raw_ratio","value":1.5,"ok":true}`},
	} {
		got, err := json.Marshal(tt.t)
		if err != nil || string(got) != tt.want {
			t.Errorf("json.Marshal = %s, %v; want %s", got, err, tt.want)
		}
	}
}

// targets computes each goal from the right paths, and a part a run did
// not measure misses instead of passing with a zero.
func TestTargets(t *testing.T) {
	stats := func(p50, tput float64) load.Stats {
		return load.Stats{N: 1, P50us: p50, P99us: 2 * p50, Throughput: tput}
	}
	res := &Results{
		Settings: map[string]any{"concurrency": 64, "burst_concurrency": 100},
		Memory:   Memory{NodeIdleKiB: 20 << 10, NodeRules: 50, ControllerIdleKiB: 25 << 10, LoadedKiB: 80 << 10, Connections: 10000, PerConnectionBytes: 5000},
		Burst: []PathResult{
			{Method: "CreateVolume+DeleteVolume", Concurrency: 100, Path: "direct", Stats: stats(1000, 100)},
			{Method: "CreateVolume+DeleteVolume", Concurrency: 100, Path: "proxy", Stats: stats(1100, 95)},
		},
		Scale: []PathResult{
			{Method: "CreateVolume", Concurrency: 1, Path: "proxy-1", Stats: stats(100, 1)},
			{Method: "CreateVolume", Concurrency: 1, Path: "proxy-10000", Stats: stats(105, 1)},
		},
	}
	for _, m := range []string{"CreateVolume", "NodeGetVolumeStats"} {
		for _, c := range []int{1, 64} {
			res.Paths = append(res.Paths,
				PathResult{Method: m, Concurrency: c, Path: "raw", Stats: stats(100, 1000)},
				PathResult{Method: m, Concurrency: c, Path: "typed", Stats: stats(110, 900)},
				PathResult{Method: m, Concurrency: c, Path: "proxy", Stats: stats(121, 800)})
		}
	}
	res.Paths = append(res.Paths,
		PathResult{Method: "Probe", Concurrency: 1, Path: "proxy", Stats: stats(100, 1)},
		PathResult{Method: "Probe", Concurrency: 1, Path: "direct", Stats: stats(50, 1)})
	goals, reports := targets(res)
	got := map[string]Target{}
	for _, g := range append(goals, reports...) {
		got[g.Name] = g
	}
	for name, want := range map[string]struct {
		value float64
		ok    bool
	}{
		"createvolume_c1_p50_proxy_over_typed":         {1.1, true},
		"nodegetvolumestats_c64_p50_proxy_over_typed":  {1.1, true},
		"createvolume_c64_throughput_proxy_over_typed": {800.0 / 900, false},
		"nodegetvolumestats_c1_p50_proxy_over_raw":     {1.21, true}, // reported: no goal to miss
		"createvolume_c64_throughput_proxy_over_raw":   {0.8, true},
		"burst_c100_throughput_proxy_over_direct":      {0.95, true},
		"burst_errors":                              {0, true},
		"rss_idle_node_50_rules":                    {20, true},
		"rss_idle_controller":                       {25, true},
		"rss_per_cached_connection":                 {5000.0 / 1024, true},
		"createvolume_p50_10000_over_1_connections": {1.05, true},
		"probe_p99":                                 {0.2, true},
		"probe_p99_direct":                          {0.1, true}, // reported: the machine's floor
		"nodegetvolumestats_c64_throughput_proxy_over_typed": {800.0 / 900, false},
	} {
		g, ok := got[name]
		if !ok || g.NotMeasured || math.Abs(g.Value-want.value) > 1e-9 || g.OK != want.ok {
			t.Errorf("%s = %+v, want value %v ok %v", name, g, want.value, want.ok)
		}
	}
	if len(goals) != 13 || len(reports) != 7 {
		t.Errorf("%d goals and %d reported values, want 13 and 7", len(goals), len(reports))
	}

	// A run that skipped the burst, the scale part and Probe.
	res.Burst, res.Scale, res.Memory.LoadedKiB = nil, nil, 0
	res.Paths = res.Paths[:len(res.Paths)-2]
	goals, _ = targets(res)
	for _, g := range goals {
		skipped := strings.HasPrefix(g.Name, "burst_") || strings.HasPrefix(g.Name, "createvolume_p50_") ||
			g.Name == "rss_per_cached_connection" || g.Name == "probe_p99"
		if skipped && (g.OK || !g.NotMeasured) {
			t.Errorf("%s after a run without it: %+v, want not measured, missed", g.Name, g)
		}
	}
}

// TestMicroTargets: the ratios BenchmarkCreateTopologyCPU reports are
// goals; a run without it misses them as not measured.
func TestMicroTargets(t *testing.T) {
	micro := parseBench("pkg: github.com/democratic-csi/proxy-topology/pkg/accessible\n" +
		"BenchmarkCreateTopologyCPU-2   	       5	1234368786 ns/op	        10.5 mapped-10x/1x	         1.5 mapped/unmapped	        12 unmapped-10x/1x	65522440 B/op	  592261 allocs/op\n")
	want := map[string]float64{
		"createtopology_10000_terms_mapped_over_unmapped": 1.5,
		"createtopology_unmapped_10000_over_1000_terms":   12,
		"createtopology_mapped_10000_over_1000_terms":     10.5,
	}
	got := microTargets(micro)
	if len(micro) != 1 || micro[0].AllocsPerOp != 592261 || len(got) != len(want) {
		t.Fatalf("parsed %+v; microTargets = %+v, want %d goals", micro, got, len(want))
	}
	for _, g := range got {
		if w, ok := want[g.Name]; !ok || math.Abs(g.Value-w) > 1e-9 || !g.OK {
			t.Errorf("%s = %+v, want %v, ok", g.Name, g, w)
		}
	}
	// The old code (issue 38), measured so: 31 s mapped, 5.4 s unmapped.
	micro[0].Metrics = map[string]float64{"mapped/unmapped": 5.76, "unmapped-10x/1x": 98, "mapped-10x/1x": 99}
	for _, g := range microTargets(micro) {
		if g.OK {
			t.Errorf("the quadratic code passes %s: %+v", g.Name, g)
		}
	}
	for _, g := range microTargets(nil) {
		if g.OK || !g.NotMeasured {
			t.Errorf("without the benchmark: %+v, want not measured, missed", g)
		}
	}
}

// The node plugin's config is valid, and what proxy-topology's own rule
// evaluation makes of it is what ptbench expects NodeGetInfo to report.
func TestNodeConfig(t *testing.T) {
	dir := t.TempDir()
	cfg, env, segments, err := writeNodeConfig(dir, "unix:///nowhere.sock", 50)
	if err != nil {
		t.Fatal(err)
	}
	if len(segments) != 25 {
		t.Fatalf("%d segments expected, want 25", len(segments))
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	loaded, err := config.LoadMainFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(loaded.Proxy.NodeTopology.FromRegexp); n != 50 {
		t.Errorf("%d rules, want 50", n)
	}
	res := loaded.Topology.Evaluate(nodetopology.Gather(context.Background(), loaded.Topology, nodeName, nil))
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(res.Segments, segments) {
		t.Errorf("evaluated %v\nwant %v", res.Segments, segments)
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

// Without democratic-csi the peer targets say skipped and why, never ok,
// and do not fail the run; the proxy over the built-in driver is reported.
func TestRealWorkTargetsWithoutPeer(t *testing.T) {
	rw := &RealWork{SkipReason: "no democratic-csi checkout given", RSSKiB: map[string]int64{"builtin-proxy": 30000}}
	for _, path := range []string{"builtin-proxy", "builtin-direct", "csi-proxy", "csi-typed"} {
		for _, c := range []int{1, 16, 64} {
			rw.Rows = append(rw.Rows, PathResult{Method: "CreateVolume+DeleteVolume", Concurrency: c, Path: path, Stats: load.Stats{N: 10, P50us: 1000, Throughput: 1000}})
		}
	}
	skipped := 0
	goals, reports := realWorkTargets(rw)
	if len(reports) != 5 {
		t.Errorf("reported = %+v, want 5: the csi proxy over the typed forwarder and over the built-in driver, the built-in behind the proxy over itself at c=1, c=16 and c=64", reports)
	}
	for _, r := range reports {
		if r.Value != 1 {
			t.Errorf("reported %s = %v, want 1", r.Name, r.Value)
		}
	}
	for _, tg := range goals {
		line := tg.Line()
		if tg.Skipped != "" {
			skipped++
			if tg.OK || !strings.Contains(line, "skipped: no democratic-csi checkout given") || strings.HasSuffix(line, " ok") {
				t.Errorf("skipped target: %q (ok %v)", line, tg.OK)
			}
			continue
		}
		if !tg.OK {
			t.Errorf("target without a peer missed: %q", line)
		}
	}
	if skipped != 5 {
		t.Errorf("%d targets skipped, want the 5 peer targets", skipped)
	}
}

// With democratic-csi the proxy in front of it is held to the typed
// forwarder in front of it in the same rounds (0.9 passes, 0.89 misses),
// not to democratic-csi served directly, whose ratio is reported beside it.
func TestRealWorkProxyHeldToTypedFloor(t *testing.T) {
	for _, tc := range []struct {
		proxy float64
		ok    bool
	}{{900, true}, {890, false}} {
		rw := &RealWork{FS: "ext4", Peer: "dcsi", RSSKiB: map[string]int64{"builtin-proxy": 30000, "dcsi-direct": 150000}}
		for path, tput := range map[string]float64{"builtin-proxy": 4000, "builtin-direct": 4000, "csi-proxy": tc.proxy, "csi-typed": 1000, "dcsi-direct": 2000, "dcsi-proxy": 1900} {
			for _, c := range []int{1, 16, 64} {
				rw.Rows = append(rw.Rows, PathResult{Method: "CreateVolume+DeleteVolume", Concurrency: c, Path: path, Stats: load.Stats{N: 10, P50us: 1e6 / tput, Throughput: tput}})
			}
		}
		goals, reports := realWorkTargets(rw)
		var floor *Target
		for i := range goals {
			if goals[i].Name == "realwork_c16_pairs_per_s_proxy_csi_over_typed" {
				floor = &goals[i]
			}
		}
		if floor == nil || floor.Skipped != "" || math.Abs(floor.Value-tc.proxy/1000) > 1e-9 || floor.OK != tc.ok {
			t.Errorf("csi-proxy %v pairs/s against csi-typed 1000: target %+v, want %.2f ok %v", tc.proxy, floor, tc.proxy/1000, tc.ok)
		}
		want := map[string]float64{
			"realwork_c16_pairs_per_s_proxy_csi_over_dcsi_direct":        tc.proxy / 2000,
			"realwork_c16_pairs_per_s_typed_over_dcsi_direct":            0.5,
			"realwork_c1_pair_p50_builtin_direct_over_dcsi_direct":       0.5,
			"realwork_c16_pairs_per_s_builtin_direct_over_dcsi_direct":   2,
			"realwork_c1_pair_p50_builtin_proxy_over_builtin_direct":     1,
			"realwork_c16_pairs_per_s_builtin_proxy_over_builtin_direct": 1,
			"realwork_c64_pairs_per_s_builtin_proxy_over_builtin_direct": 1,
		}
		for _, r := range reports {
			if w, ok := want[r.Name]; !ok || math.Abs(r.Value-w) > 1e-9 {
				t.Errorf("reported %s = %v, want %v (known: %v)", r.Name, r.Value, w, ok)
			}
			delete(want, r.Name)
		}
		if len(want) > 0 {
			t.Errorf("not reported: %v", want)
		}
	}
}

// On tmpfs the goals compare no disk work: every peer target says skipped
// with that reason, even with the peer's rows present, and only the error
// count keeps its verdict.
func TestRealWorkTargetsOnTmpfs(t *testing.T) {
	rw := &RealWork{FS: "tmpfs", Peer: "/opt/dcsi", RSSKiB: map[string]int64{"builtin-proxy": 30000, "dcsi-direct": 150000}}
	for _, path := range []string{"builtin-proxy", "builtin-direct", "csi-proxy", "dcsi-direct", "dcsi-proxy"} {
		for _, c := range []int{1, 16, 64} {
			rw.Rows = append(rw.Rows, PathResult{Method: "CreateVolume+DeleteVolume", Concurrency: c, Path: path, Stats: load.Stats{N: 10, P50us: 1000, Throughput: 1000}})
		}
	}
	goals, _ := realWorkTargets(rw)
	skipped := 0
	for _, tg := range goals {
		line := tg.Line()
		if tg.Name == "realwork_errors" {
			if tg.Skipped != "" || !tg.OK {
				t.Errorf("errors target on tmpfs: %q, want its verdict (ok)", line)
			}
			continue
		}
		if tg.OK || !strings.Contains(line, ": skipped: base path is tmpfs (no disk) (goal ") {
			t.Errorf("target on tmpfs: %q (ok %v), want skipped: base path is tmpfs (no disk)", line, tg.OK)
		}
		skipped++
	}
	if skipped != 5 {
		t.Errorf("%d targets skipped on tmpfs, want 5", skipped)
	}
}

// The built-in driver's fsyncs per create at c=16 are a goal (0.5 passes,
// 0.51 misses) once they were counted; every count is reported.
func TestRealWorkFsyncsPerCreate(t *testing.T) {
	for _, tc := range []struct {
		fsyncs float64
		ok     bool
	}{{0.5, true}, {0.51, false}} {
		rw := &RealWork{FS: "ext4", StateOps: []StateOps{
			{Path: "builtin-proxy", Concurrency: 1, Pairs: 10, FsyncsPerCreate: 2, DirOpsPerCreate: 0.1},
			{Path: "builtin-proxy", Concurrency: 16, Pairs: 10, FsyncsPerCreate: tc.fsyncs, DirOpsPerCreate: 0.1},
		}}
		goals, reports := realWorkTargets(rw)
		var found *Target
		for i := range goals {
			if goals[i].Name == "realwork_c16_fsyncs_per_create_builtin_proxy" {
				found = &goals[i]
			}
		}
		if found == nil || found.OK != tc.ok || found.Value != tc.fsyncs {
			t.Errorf("%v fsyncs per create at c=16: target %+v, want ok %v", tc.fsyncs, found, tc.ok)
		}
		n := 0
		for _, r := range reports {
			if strings.Contains(r.Name, "_per_create_builtin_proxy") {
				n++
			}
		}
		if n != 4 {
			t.Errorf("%d per-create counts reported, want 4 (fsyncs and directory operations at c=1 and c=16)", n)
		}
	}
}

// make interop and make bench take the checkout under one name,
// DEMOCRATIC_CSI; DEMOCRATIC_CSI_DIR, the name make bench used first, still
// works when the other is not set.
func TestDcsiFromEnv(t *testing.T) {
	for _, tc := range []struct{ dcsi, dir, want string }{
		{"", "", ""},
		{"/a", "", "/a"},
		{"", "/b", "/b"},
		{"/a", "/b", "/a"},
	} {
		t.Setenv("DEMOCRATIC_CSI", tc.dcsi)
		t.Setenv("DEMOCRATIC_CSI_DIR", tc.dir)
		if got := dcsiFromEnv(); got != tc.want {
			t.Errorf("DEMOCRATIC_CSI=%q DEMOCRATIC_CSI_DIR=%q: %q, want %q", tc.dcsi, tc.dir, got, tc.want)
		}
	}
}

// TestCompareNote: a table with a compare path says that its ratios to the
// floors are not make bench's; one without it does not.
func TestCompareNote(t *testing.T) {
	row := func(path string) PathResult {
		return PathResult{Method: "CreateVolume", Concurrency: 1, Path: path, Stats: load.Stats{N: 1, P50us: 100, Throughput: 10}}
	}
	paths := []PathResult{row("raw"), row("typed"), row("proxy")}
	for _, tt := range []struct {
		paths []PathResult
		want  bool
	}{{paths, false}, {append(paths, row("compare")), true}} {
		var out strings.Builder
		printReport(&out, &Results{Paths: tt.paths})
		if got := strings.Contains(out.String(), compareNote); got != tt.want {
			t.Errorf("paths %d: note printed %v, want %v:\n%s", len(tt.paths), got, tt.want, out.String())
		}
	}
}
