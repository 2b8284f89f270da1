package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
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
	// Paths: direct, raw and proxy for each method and concurrency.
	Paths []PathResult `json:"paths"`
	// Scale: CreateVolume with one connection file vs many, raw as the
	// drift reference.
	Scale   []PathResult `json:"scale"`
	Memory  Memory       `json:"memory"`
	Micro   []Micro      `json:"micro"`
	Targets []Target     `json:"targets"`
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

// Memory is the proxy's resident set size.
type Memory struct {
	// IdleKiB: the many-connection process, started and never called.
	IdleKiB int64 `json:"idle_kib"`
	// IdleOneConnectionKiB: the one-connection process, idle.
	IdleOneConnectionKiB int64 `json:"idle_one_connection_kib"`
	// LoadedKiB: after every connection was loaded once.
	LoadedKiB int64 `json:"loaded_kib"`
	// PeakKiB and RawPeakKiB: VmHWM (the highest VmRSS so far) of the
	// one-connection proxy and of the raw forwarder after the calls at
	// both concurrencies; 0 when not measured.
	PeakKiB            int64   `json:"peak_kib,omitempty"`
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
}

// Target is one goal with its measured value.
type Target struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit,omitempty"`
	// Op is "<=" or ">=".
	Op   string  `json:"op"`
	Goal float64 `json:"goal"`
	OK   bool    `json:"ok"`
}

// Line renders "target <name>: <value> (goal <goal>) ok|MISS".
func (t Target) Line() string {
	verdict := "ok"
	if !t.OK {
		verdict = "MISS"
	}
	return fmt.Sprintf("target %s: %s (goal %s %s) %s", t.Name, t.format(t.Value), t.Op, t.format(t.Goal), verdict)
}

func (t Target) format(v float64) string {
	s := strconv.FormatFloat(v, 'f', 3, 64)
	if t.Unit != "" {
		s = strconv.FormatFloat(v, 'f', 2, 64) + " " + t.Unit
	}
	return s
}

func target(name string, value float64, unit, op string, goal float64) Target {
	ok := value <= goal
	if op == ">=" {
		ok = value >= goal
	}
	return Target{Name: name, Value: value, Unit: unit, Op: op, Goal: goal, OK: ok}
}

func find(list []PathResult, method string, conc int, path string) load.Stats {
	for _, r := range list {
		if r.Method == method && r.Concurrency == conc && r.Path == path {
			return r.Stats
		}
	}
	return load.Stats{}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// targets evaluates the goals of issue 7.
func targets(res *Results) []Target {
	var out []Target
	conc := res.Settings["concurrency"].(int)
	for _, method := range []string{"CreateVolume", "NodeGetVolumeStats"} {
		for _, c := range []int{1, conc} {
			p, r := find(res.Paths, method, c, "proxy"), find(res.Paths, method, c, "raw")
			out = append(out, target(fmt.Sprintf("%s_c%d_p50_proxy_over_raw", strings.ToLower(method), c), ratio(p.P50us, r.P50us), "", "<=", 1.25))
		}
	}
	for _, method := range []string{"CreateVolume", "NodeGetVolumeStats"} {
		p, r := find(res.Paths, method, conc, "proxy"), find(res.Paths, method, conc, "raw")
		out = append(out, target(fmt.Sprintf("%s_c%d_throughput_proxy_over_raw", strings.ToLower(method), conc), ratio(p.Throughput, r.Throughput), "", ">=", 0.80))
	}
	many := find(res.Scale, "CreateVolume", 1, fmt.Sprintf("proxy-%d", res.Memory.Connections))
	one := find(res.Scale, "CreateVolume", 1, "proxy-1")
	out = append(out, target(fmt.Sprintf("createvolume_p50_%d_over_1_connections", res.Memory.Connections), ratio(many.P50us, one.P50us), "", "<=", 1.10))
	out = append(out, target("probe_p99", find(res.Paths, "Probe", 1, "proxy").P99us/1000, "ms", "<=", 1))
	out = append(out, target("rss_idle", float64(res.Memory.IdleKiB)/1024, "MiB", "<=", 40))
	out = append(out, target("rss_per_cached_connection", res.Memory.PerConnectionBytes/1024, "KiB", "<=", 8))
	return out
}

func printReport(w io.Writer, res *Results) {
	fmt.Fprintf(w, "\nproxy-topology %s benchmark, %s\n", res.Revision, res.Time.Format(time.RFC3339))
	fmt.Fprintf(w, "machine: %d CPUs, %s, %s, %s; load average %s at start, %s at end\n",
		res.Machine.NumCPU, res.Machine.CPUModel, res.Machine.GoVersion, res.Machine.Kernel, res.Machine.LoadStart, res.Machine.LoadEnd)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	table := func(title string, rows []PathResult, ref string) {
		fmt.Fprintf(w, "\n%s\n", title)
		fmt.Fprintf(tw, "method\tc\tpath\tcalls\tp50 µs\tp99 µs\tcalls/s\tp50/%s\tcalls/s / %s\tserver CPU µs/call\t\n", ref, ref)
		for _, r := range rows {
			base := find(rows, r.Method, r.Concurrency, ref)
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%.1f\t%.1f\t%.0f\t%.3f\t%.3f\t%.1f\t\n", r.Method, r.Concurrency, r.Path, r.N,
				r.P50us, r.P99us, r.Throughput, ratio(r.P50us, base.P50us), ratio(r.Throughput, base.Throughput), r.CPUus)
		}
		tw.Flush()
	}
	table("paths (interleaved rounds)", res.Paths, "raw")
	for _, method := range []string{"CreateVolume", "NodeGetVolumeStats"} {
		if sh := find(res.Paths, method, 1, "raw-shared"); sh.P50us > 0 {
			fmt.Fprintf(w, "%s c=1 against the floor run from the benchmark's own binary (raw-shared, not a target): p50 proxy/raw-shared %.3f\n",
				method, ratio(find(res.Paths, method, 1, "proxy").P50us, sh.P50us))
		}
	}
	if len(res.Scale) > 0 {
		table("scale (interleaved rounds)", res.Scale, "proxy-1")
	}
	m := res.Memory
	fmt.Fprintf(w, "\nmemory (VmRSS of proxy-topology)\n")
	fmt.Fprintf(tw, "idle, 1 connection file\t%.1f MiB\t\n", float64(m.IdleOneConnectionKiB)/1024)
	fmt.Fprintf(tw, "idle, %d connection files\t%.1f MiB\t\n", m.Connections, float64(m.IdleKiB)/1024)
	fmt.Fprintf(tw, "%d connections cached\t%.1f MiB\t\n", m.Connections, float64(m.LoadedKiB)/1024)
	fmt.Fprintf(tw, "per cached connection\t%.0f B\t\n", m.PerConnectionBytes)
	fmt.Fprintf(tw, "first load of %d connections\t%.2f s\t\n", m.Connections, m.LoadSeconds)
	if m.PeakKiB > 0 {
		fmt.Fprintf(tw, "peak (VmHWM) after the calls, 1 connection\t%.1f MiB\t\n", float64(m.PeakKiB)/1024)
		fmt.Fprintf(tw, "raw forwarder's peak (VmHWM) after the calls\t%.1f MiB\t\n", float64(m.RawPeakKiB)/1024)
	}
	tw.Flush()
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
		"benchtime": o.microTime, "raw_stream_workers": o.rawWorkers,
		// The floor (raw) runs from a copy of the benchmark's binary;
		// raw-shared, if measured, from the binary itself.
		"raw_binary": "copy", "raw_shared_measured": o.rawShared,
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
// rules) and requirement matching (100 terms x 20 entries).
func microBenchmarks(root, benchtime string) ([]Micro, error) {
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", "^(BenchmarkEvaluate|BenchmarkDecide|BenchmarkCompiledDecide)$",
		"-benchmem", "-benchtime", benchtime, "./pkg/nodetopology", "./pkg/accessible")
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.MultiWriter(os.Stdout, &out), os.Stderr
	err := cmd.Run()
	return parseBench(out.String()), err
}

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op\s+(\d+) B/op\s+(\d+) allocs/op`)

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
		ns, _ := strconv.ParseFloat(m[2], 64)
		b, _ := strconv.ParseInt(m[3], 10, 64)
		a, _ := strconv.ParseInt(m[4], 10, 64)
		res = append(res, Micro{Package: pkg, Name: m[1], NsPerOp: ns, BytesPerOp: b, AllocsPerOp: a})
	}
	return res
}
