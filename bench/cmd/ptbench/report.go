package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/democratic-csi/proxy-topology/bench/load"
)

// Results is bench/results.json.
type Results struct {
	Time time.Time `json:"time"`
	// Revision is git describe of the measured tree.
	Revision string         `json:"revision"`
	Machine  Machine        `json:"machine"`
	Settings map[string]any `json:"settings"`
	// Paths: direct, raw, typed and proxy for each method and concurrency.
	Paths []PathResult `json:"paths"`
	// Burst: CreateVolume+DeleteVolume pairs to local-hostpath, direct and
	// through the proxy; the errors are failed pairs, the volumes left
	// what ListVolumes still showed afterwards.
	Burst            []PathResult `json:"burst"`
	BurstErrors      int64        `json:"burst_errors"`
	BurstFirstError  string       `json:"burst_first_error,omitempty"`
	BurstVolumesLeft int          `json:"burst_volumes_left"`
	// BurstFS is where the burst's volumes were (burstFS).
	BurstFS string `json:"burst_fs,omitempty"`
	// Scale: CreateVolume with one connection file vs many, typed as the
	// drift reference.
	Scale []PathResult `json:"scale"`
	// RealWork is the real-work section (realwork.go).
	RealWork *RealWork `json:"real_work,omitempty"`
	Memory   Memory    `json:"memory"`
	Micro    []Micro   `json:"micro"`
	Targets  []Target  `json:"targets"`
	// Reported are ratios without a goal (proxy over the raw forwarder).
	Reported []Target `json:"reported"`
}

// Machine describes where the run happened.
type Machine struct {
	NumCPU    int    `json:"nproc"`
	CPUModel  string `json:"cpu_model"`
	GoVersion string `json:"go_version"`
	Kernel    string `json:"kernel"`
	LoadStart string `json:"load_average_start"`
	LoadEnd   string `json:"load_average_end"`
}

// PathResult is one path's latency and throughput for one method.
type PathResult struct {
	Method      string `json:"method"`
	Concurrency int    `json:"concurrency"`
	Path        string `json:"path"`
	load.Stats
}

// Memory is proxy-topology's resident set size (VmRSS), in KiB.
type Memory struct {
	// ControllerIdleKiB: the controller (--mode controller) with
	// Connections connection files, started and never called.
	ControllerIdleKiB int64 `json:"controller_idle_kib"`
	// NodeIdleKiB: the node plugin (--mode node) with NodeRules
	// node-topology rules, idle.
	NodeIdleKiB int64 `json:"node_idle_kib"`
	NodeRules   int   `json:"node_rules"`
	// IdleOneConnectionKiB: proxy-1 (--mode all, one connection file),
	// idle.
	IdleOneConnectionKiB int64 `json:"idle_one_connection_kib"`
	// LoadedKiB: the controller after every connection was loaded once.
	LoadedKiB int64 `json:"loaded_kib"`
	// PeakKiB, TypedPeakKiB and RawPeakKiB: VmHWM (the highest VmRSS so
	// far) of proxy-1 and of the two forwarders after the calls at both
	// concurrencies.
	PeakKiB            int64   `json:"peak_kib,omitempty"`
	TypedPeakKiB       int64   `json:"typed_peak_kib,omitempty"`
	RawPeakKiB         int64   `json:"raw_peak_kib,omitempty"`
	Connections        int     `json:"connections"`
	PerConnectionBytes float64 `json:"per_connection_bytes"`
	LoadSeconds        float64 `json:"load_seconds"`
}

// Micro is one go test benchmark line.
type Micro struct {
	Package     string  `json:"package"`
	Name        string  `json:"name"`
	NsPerOp     float64 `json:"ns_per_op"`
	BytesPerOp  int64   `json:"bytes_per_op"`
	AllocsPerOp int64   `json:"allocs_per_op"`
	// Metrics are what the benchmark reports itself, by unit.
	Metrics map[string]float64 `json:"metrics,omitempty"`
}

// Target is one goal with its measured value; without Op it is a value
// reported with no goal.
type Target struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit,omitempty"`
	// Op is "<=" or ">="; Goal is nil for a reported value.
	Op   string   `json:"op,omitempty"`
	Goal *float64 `json:"goal,omitempty"`
	OK   bool     `json:"ok"`
	// NotMeasured: the run skipped or failed what the value comes from;
	// a target then misses.
	NotMeasured bool `json:"not_measured,omitempty"`
	// Skipped says why a target that needs a peer (democratic-csi) was
	// not measured; it is neither ok nor a miss.
	Skipped string `json:"skipped,omitempty"`
}

// Line renders "target <name>: <value> (goal <op> <goal>) ok|MISS", or for
// a reported value "reported <name>: <value> (no goal)".
func (t Target) Line() string {
	value := t.format(t.Value)
	if t.NotMeasured {
		value = "not measured"
	}
	if t.Goal == nil {
		return fmt.Sprintf("reported %s: %s (no goal)", t.Name, value)
	}
	if t.Skipped != "" {
		return fmt.Sprintf("target %s: skipped: %s (goal %s %s)", t.Name, t.Skipped, t.Op, t.format(*t.Goal))
	}
	verdict := "ok"
	if !t.OK {
		verdict = "MISS"
	}
	return fmt.Sprintf("target %s: %s (goal %s %s) %s", t.Name, value, t.Op, t.format(*t.Goal), verdict)
}

func (t Target) format(v float64) string {
	switch t.Unit {
	case "":
		return strconv.FormatFloat(v, 'f', 3, 64)
	case "errors":
		return strconv.FormatFloat(v, 'f', 0, 64) + " " + t.Unit
	}
	return strconv.FormatFloat(v, 'f', 2, 64) + " " + t.Unit
}

// target checks value against goal; a NaN value (see ratio) was not
// measured and misses.
func target(name string, value float64, unit, op string, goal float64) Target {
	if math.IsNaN(value) {
		return Target{Name: name, Unit: unit, Op: op, Goal: &goal, NotMeasured: true}
	}
	ok := value <= goal
	if op == ">=" {
		ok = value >= goal
	}
	return Target{Name: name, Value: value, Unit: unit, Op: op, Goal: &goal, OK: ok}
}

// reported is a value with no goal, so nothing to miss.
func reported(name string, value float64) Target {
	if math.IsNaN(value) {
		return Target{Name: name, NotMeasured: true, OK: true}
	}
	return Target{Name: name, Value: value, OK: true}
}

func find(list []PathResult, method string, conc int, path string) load.Stats {
	for _, r := range list {
		if r.Method == method && r.Concurrency == conc && r.Path == path {
			return r.Stats
		}
	}
	return load.Stats{}
}

// ratio is a/b, or NaN when either was not measured (is 0).
func ratio(a, b float64) float64 {
	if a == 0 || b == 0 {
		return math.NaN()
	}
	return a / b
}

// positive is v, or NaN when it was not measured (is 0 or less).
func positive(v float64) float64 {
	if v <= 0 {
		return math.NaN()
	}
	return v
}

// targets evaluates the goals of the paths, burst, scale and memory, and
// the ratios reported without a goal.
func targets(res *Results) (goals, reports []Target) {
	conc := res.Settings["concurrency"].(int)
	methods := []string{"CreateVolume", "NodeGetVolumeStats"}
	for _, floor := range []string{"typed", "raw"} {
		for _, method := range methods {
			for _, c := range []int{1, conc} {
				p, f := find(res.Paths, method, c, "proxy"), find(res.Paths, method, c, floor)
				name := fmt.Sprintf("%s_c%d_p50_proxy_over_%s", strings.ToLower(method), c, floor)
				if floor == "typed" {
					goals = append(goals, target(name, ratio(p.P50us, f.P50us), "", "<=", 1.10))
				} else {
					reports = append(reports, reported(name, ratio(p.P50us, f.P50us)))
				}
			}
		}
		for _, method := range methods {
			p, f := find(res.Paths, method, conc, "proxy"), find(res.Paths, method, conc, floor)
			name := fmt.Sprintf("%s_c%d_throughput_proxy_over_%s", strings.ToLower(method), conc, floor)
			if floor == "typed" {
				goals = append(goals, target(name, ratio(p.Throughput, f.Throughput), "", ">=", 0.90))
			} else {
				reports = append(reports, reported(name, ratio(p.Throughput, f.Throughput)))
			}
		}
	}
	bc := res.Settings["burst_concurrency"].(int)
	bp, bd := find(res.Burst, "CreateVolume+DeleteVolume", bc, "proxy"), find(res.Burst, "CreateVolume+DeleteVolume", bc, "direct")
	goals = append(goals, target(fmt.Sprintf("burst_c%d_throughput_proxy_over_direct", bc), ratio(bp.Throughput, bd.Throughput), "", ">=", 0.90))
	burstErrors := float64(res.BurstErrors)
	if len(res.Burst) == 0 {
		burstErrors = math.NaN()
	}
	goals = append(goals, target("burst_errors", burstErrors, "errors", "<=", 0))

	m := res.Memory
	goals = append(goals, target(fmt.Sprintf("rss_idle_node_%d_rules", m.NodeRules), positive(float64(m.NodeIdleKiB))/1024, "MiB", "<=", 30))
	goals = append(goals, target("rss_idle_controller", positive(float64(m.ControllerIdleKiB))/1024, "MiB", "<=", 30))
	perConn := math.NaN()
	if m.LoadedKiB > 0 {
		perConn = m.PerConnectionBytes / 1024
	}
	goals = append(goals, target("rss_per_cached_connection", perConn, "KiB", "<=", 8))
	many := find(res.Scale, "CreateVolume", 1, fmt.Sprintf("proxy-%d", m.Connections))
	one := find(res.Scale, "CreateVolume", 1, "proxy-1")
	goals = append(goals, target(fmt.Sprintf("createvolume_p50_%d_over_1_connections", m.Connections), ratio(many.P50us, one.P50us), "", "<=", 1.10))
	goals = append(goals, target("probe_p99", positive(find(res.Paths, "Probe", 1, "proxy").P99us)/1000, "ms", "<=", 1))
	// The goal is in milliseconds, so the machine's own floor goes beside
	// it: the no-op upstream answering Probe at once, in the same rounds.
	floor := reported("probe_p99_direct", positive(find(res.Paths, "Probe", 1, "direct").P99us)/1000)
	floor.Unit = "ms"
	reports = append(reports, floor)
	return goals, reports
}

// compareNote is printed under a table with a compare path: a fifth server
// in the rounds moves the other paths' latencies at concurrency 1, and a
// compare build of nearly the proxy's code has nearly its code layout, so
// the two train the CPU's branch predictors for each other there. An A/B
// test compares its two builds with each other; its ratios to the floors
// are not make bench's (docs/performance.md).
const compareNote = "note: the compare path adds a server to the rounds, which moves every path's concurrency-1 latency:\n" +
	"      compare proxy with compare; these ratios to typed and raw are not comparable with make bench's"

func printReport(w io.Writer, res *Results) {
	fmt.Fprintf(w, "\nproxy-topology %s benchmark, %s\n", res.Revision, res.Time.Format(time.RFC3339))
	fmt.Fprintf(w, "machine: %d CPUs, %s, %s, %s; load average %s at start, %s at end\n",
		res.Machine.NumCPU, res.Machine.CPUModel, res.Machine.GoVersion, res.Machine.Kernel, res.Machine.LoadStart, res.Machine.LoadEnd)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	// table prints rows with their p50 and throughput over each of refs.
	table := func(title string, rows []PathResult, refs ...string) {
		fmt.Fprintf(w, "\n%s\n", title)
		fmt.Fprintf(tw, "method\tc\tpath\tcalls\tp50 µs\tp99 µs\tcalls/s\t")
		for _, ref := range refs {
			fmt.Fprintf(tw, "p50/%s\tcalls/s / %s\t", ref, ref)
		}
		fmt.Fprintf(tw, "server CPU µs/call\t\n")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%.1f\t%.1f\t%.0f\t", r.Method, r.Concurrency, r.Path, r.N, r.P50us, r.P99us, r.Throughput)
			for _, ref := range refs {
				base := find(rows, r.Method, r.Concurrency, ref)
				fmt.Fprintf(tw, "%.3f\t%.3f\t", ratio(r.P50us, base.P50us), ratio(r.Throughput, base.Throughput))
			}
			fmt.Fprintf(tw, "%.1f\t\n", r.CPUus)
		}
		tw.Flush()
	}
	if len(res.Paths) > 0 {
		table("paths (interleaved rounds)", res.Paths, "typed", "raw")
		for _, r := range res.Paths {
			if r.Path == "compare" {
				fmt.Fprintln(w, compareNote)
				break
			}
		}
	}
	if len(res.Burst) > 0 {
		table("burst to local-hostpath (interleaved rounds; a call is a CreateVolume+DeleteVolume pair)", res.Burst, "direct")
		fmt.Fprintf(w, "failed pairs: %d; volumes left afterwards: %d\n", res.BurstErrors, res.BurstVolumesLeft)
		if res.BurstFS != "" {
			fmt.Fprintf(w, "volumes on %s\n", res.BurstFS)
		}
		if res.BurstFirstError != "" {
			fmt.Fprintf(w, "first failure: %s\n", res.BurstFirstError)
		}
	}
	if len(res.Scale) > 0 {
		table("scale (interleaved rounds)", res.Scale, "proxy-1")
	}
	if rw := res.RealWork; rw != nil {
		ref := "dcsi-direct"
		if rw.Peer == "" {
			ref = "builtin-direct"
		}
		table(fmt.Sprintf("real work: CreateVolume+DeleteVolume pairs on %s (%s, %s), interleaved rounds", rw.Dir, rw.FS, rw.Device), rw.Rows, ref)
		if rw.Peer != "" {
			fmt.Fprintf(w, "democratic-csi: %s (%s)\n", rw.Peer, rw.PeerRevision)
			if rw.NoPeerProxy != "" {
				fmt.Fprintf(w, "dcsi-proxy skipped: %s\n", rw.NoPeerProxy)
			}
		} else {
			fmt.Fprintf(w, "democratic-csi paths skipped: %s\n", rw.SkipReason)
		}
		fmt.Fprintf(w, "csi-proxy forwards to: %s\nfailed pairs: %d; volumes left afterwards: %d\n", rw.Upstream, rw.Errors, rw.Left)
		if rw.First != "" {
			fmt.Fprintf(w, "first failure: %s\n", rw.First)
		}
		for _, s := range rw.StateOps {
			fmt.Fprintf(tw, "%s at c=%d: fsyncs per create\t%.3f\tdirectory operations per create\t%.3f\t(%d pairs)\n", s.Path, s.Concurrency, s.FsyncsPerCreate, s.DirOpsPerCreate, s.Pairs)
		}
		for _, name := range realWorkPaths {
			if kib, ok := rw.RSSKiB[name]; ok {
				fmt.Fprintf(tw, "VmRSS of %s after %d pairs\t%.1f MiB\t\n", name, rw.PairsServed[name], float64(kib)/1024)
			}
		}
		tw.Flush()
	}
	if m := res.Memory; m.ControllerIdleKiB > 0 {
		fmt.Fprintf(w, "\nmemory (VmRSS of proxy-topology)\n")
		fmt.Fprintf(tw, "node plugin (--mode node, %d node-topology rules), idle\t%.1f MiB\t\n", m.NodeRules, float64(m.NodeIdleKiB)/1024)
		fmt.Fprintf(tw, "controller (--mode controller, %d connection files), idle\t%.1f MiB\t\n", m.Connections, float64(m.ControllerIdleKiB)/1024)
		fmt.Fprintf(tw, "--mode all, 1 connection file, idle\t%.1f MiB\t\n", float64(m.IdleOneConnectionKiB)/1024)
		if m.LoadedKiB > 0 {
			fmt.Fprintf(tw, "controller, %d connections cached\t%.1f MiB\t\n", m.Connections, float64(m.LoadedKiB)/1024)
			fmt.Fprintf(tw, "per cached connection\t%.0f B\t\n", m.PerConnectionBytes)
			fmt.Fprintf(tw, "first load of %d connections\t%.2f s\t\n", m.Connections, m.LoadSeconds)
		}
		if m.PeakKiB > 0 {
			fmt.Fprintf(tw, "peak (VmHWM) after the calls: proxy-1\t%.1f MiB\t\n", float64(m.PeakKiB)/1024)
			fmt.Fprintf(tw, "typed forwarder\t%.1f MiB\t\n", float64(m.TypedPeakKiB)/1024)
			fmt.Fprintf(tw, "raw forwarder\t%.1f MiB\t\n", float64(m.RawPeakKiB)/1024)
		}
		tw.Flush()
	}
	if len(res.Micro) > 0 {
		fmt.Fprintf(w, "\nmicro-benchmarks\n")
		fmt.Fprintf(tw, "package\tbenchmark\tns/op\tB/op\tallocs/op\t\n")
		for _, mb := range res.Micro {
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%d\t%d\t\n", mb.Package, mb.Name, mb.NsPerOp, mb.BytesPerOp, mb.AllocsPerOp)
		}
		tw.Flush()
	}
	fmt.Fprintln(w)
}

func writeJSON(path string, res *Results) error {
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

func settings(o options) map[string]any {
	return map[string]any{
		"rounds_c1": o.rounds1, "calls_per_round_c1": o.n1, "rounds_high": o.rounds64, "calls_per_round_high": o.n64,
		"concurrency": o.conc, "connections": o.connections, "probes_per_round": o.probeN,
		"benchtime": o.microTime, "burst_rounds": o.burstRounds, "burst_pairs": o.burstPairs,
		"burst_concurrency": o.burstConc, "node_rules": o.nodeRules,
		"realwork_rounds": o.realWorkRounds, "realwork_pairs_c1": o.realWorkPairs1, "realwork_pairs_c16": o.realWorkPairs16, "realwork_pairs_c64": o.realWorkPairs64,
		// Both forwarders run from copies of the benchmark's binary.
		"forwarder_binaries": "copies",
	}
}

func machineInfo() Machine {
	m := Machine{NumCPU: runtime.NumCPU(), GoVersion: runtime.Version(), LoadStart: loadAvg()}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(data))
	}
	return m
}

func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// microBenchmarks are the benchmarks the issue names: rule evaluation (50
// rules), requirement matching (100 terms x 20 entries) and the ratios of
// the topology work of a CreateVolume with 1,000 and 10,000 terms, with
// and without upstreamTopology (BenchmarkCreateTopologyCPU).
func microBenchmarks(root, benchtime string) ([]Micro, error) {
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", "^(BenchmarkEvaluate|BenchmarkDecide|BenchmarkCompiledDecide|BenchmarkCreateTopologyCPU)$",
		"-benchmem", "-benchtime", benchtime, "./pkg/nodetopology", "./pkg/accessible")
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.MultiWriter(os.Stdout, &out), os.Stderr
	err := cmd.Run()
	return parseBench(out.String()), err
}

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// parseBench reads go test -bench output: ns/op, B/op and allocs/op, and
// the metrics a benchmark reports itself (b.ReportMetric) by unit.
func parseBench(out string) []Micro {
	var res []Micro
	pkg := ""
	for _, line := range strings.Split(out, "\n") {
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimSpace(p)
			continue
		}
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		mb := Micro{Package: pkg, Name: m[1]}
		f := strings.Fields(m[2])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch unit := f[i+1]; unit {
			case "ns/op":
				mb.NsPerOp = v
			case "B/op":
				mb.BytesPerOp = int64(v)
			case "allocs/op":
				mb.AllocsPerOp = int64(v)
			default:
				if mb.Metrics == nil {
					mb.Metrics = map[string]float64{}
				}
				mb.Metrics[unit] = v
			}
		}
		if mb.NsPerOp == 0 {
			continue
		}
		res = append(res, mb)
	}
	return res
}

// microTargets are the goals on the micro-benchmarks, ratios
// BenchmarkCreateTopologyCPU measures within one run, interleaved and in
// CPU time: a connection with upstreamTopology at most twice as dear as
// one without at 10,000 terms (issue 38: it was quadratic in the terms
// there), and on each, 10,000 terms at most 20 times as dear as 1,000
// (linear is 10; quadratic, as the old preferred lookup was on both,
// 100). A run without the micro part misses them as not measured.
func microTargets(micro []Micro) []Target {
	metric := func(unit string) float64 {
		for _, m := range micro {
			if m.Package == "github.com/democratic-csi/proxy-topology/pkg/accessible" && m.Name == "BenchmarkCreateTopologyCPU" {
				if v, ok := m.Metrics[unit]; ok && v > 0 {
					return v
				}
			}
		}
		return math.NaN()
	}
	return []Target{
		target("createtopology_10000_terms_mapped_over_unmapped", metric("mapped/unmapped"), "", "<=", 2),
		target("createtopology_unmapped_10000_over_1000_terms", metric("unmapped-10x/1x"), "", "<=", 20),
		target("createtopology_mapped_10000_over_1000_terms", metric("mapped-10x/1x"), "", "<=", 20),
	}
}
