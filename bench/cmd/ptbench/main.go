// Command ptbench measures what proxy-topology costs on top of what any
// CSI proxy has to pay. In one run it starts a no-op CSI upstream, a typed
// forwarder (bench/typedproxy: decode, forward, encode with the generated
// CSI types and no logic; the floor of the targets), a raw byte forwarder
// (bench/rawproxy: no decoding at all; reported) and the real
// proxy-topology binary, and measures the paths in interleaved rounds. It
// also measures a burst of CreateVolume+DeleteVolume pairs to the built-in
// local-hostpath driver with and without the proxy, scale with 10,000
// connection files, Probe latency, the idle memory of the node plugin and
// the controller and the memory per cached connection, runs the
// rule-evaluation and requirement-matching micro-benchmarks, writes
// bench/results.json and prints one line per target. It exits non-zero when
// a target is missed. See docs/performance.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "noop":
			os.Exit(noopMain(os.Args[2:]))
		}
	}
	os.Exit(benchMain(os.Args[1:]))
}

// options are the benchmark's knobs; the defaults keep a run to a couple
// of minutes on 2 cores.
type options struct {
	out string
	// rounds1 rounds of n1 calls per path measure concurrency 1 (and Probe
	// and scale); rounds64 rounds of n64 calls the high concurrency. Short
	// rounds interleave the paths finely, so load that other processes put
	// on the machine falls on every path alike.
	rounds1, rounds64 int
	n1, n64           int
	conc              int
	connections       int
	probeN            int
	// burstRounds rounds of burstPairs CreateVolume+DeleteVolume pairs
	// at burstConc, to local-hostpath with and without the proxy.
	burstRounds, burstPairs, burstConc int
	// nodeRules is the number of fromRegexp rules of the node plugin.
	nodeRules int
	microTime string
	keep      bool
	proxyBin  string
	// profile, when set, replaces the measurements: CPU and allocation
	// profiles of the raw and typed forwarders and the proxy under load go
	// into this directory.
	profile        string
	profileSeconds int
	// compare is another proxy-topology binary measured as the path
	// "compare" next to "proxy", for A/B tests of a change.
	compare string
	// methods are measured on the paths; skip leaves parts out (for
	// experiments: the targets of a skipped part MISS as not measured).
	methods []string
	skip    map[string]bool
	// only, when set, runs just these parts (realwork: the real-work
	// section alone, written to bench/realwork.json unless -out is given).
	only map[string]bool
	// dcsi is a democratic-csi checkout for the real-work section's peer
	// paths; realWorkDir where its volumes go (default: the run's
	// temporary directory, which must be on a disk); rounds and pairs per
	// round at c=1 and c=16.
	dcsi                                                             string
	realWorkDir                                                      string
	realWorkRounds, realWorkPairs1, realWorkPairs16, realWorkPairs64 int
}

// parts are what -skip leaves out; onlyParts what -only runs alone (the
// others share the servers that measure starts for all of them).
var (
	parts     = []string{"c1", "c64", "probe", "burst", "scale", "micro", "realwork"}
	onlyParts = []string{"realwork", "micro"}
)

// runs reports whether part is measured in this run.
func (o options) runs(part string) bool {
	if len(o.only) > 0 {
		return o.only[part]
	}
	return !o.skip[part]
}

func benchMain(args []string) int {
	var o options
	fs := flag.NewFlagSet("ptbench", flag.ExitOnError)
	fs.StringVar(&o.out, "out", "bench/results.json", "where to write the results")
	fs.IntVar(&o.rounds1, "rounds1", 200, "interleaved rounds at concurrency 1 (also Probe and scale)")
	fs.IntVar(&o.n1, "n1", 20, "calls per path per round at concurrency 1")
	fs.IntVar(&o.rounds64, "rounds64", 24, "interleaved rounds at the high concurrency")
	fs.IntVar(&o.n64, "n64", 1600, "calls per path per round at the high concurrency")
	fs.IntVar(&o.conc, "concurrency", 64, "the high concurrency")
	fs.IntVar(&o.connections, "connections", 10000, "connection files for the scale and memory measurements")
	fs.IntVar(&o.probeN, "probe-n", 25, "Probe calls per path per round")
	fs.IntVar(&o.burstRounds, "burst-rounds", 15, "interleaved rounds of the local-hostpath burst")
	fs.IntVar(&o.burstPairs, "burst-pairs", 1000, "CreateVolume+DeleteVolume pairs per path per burst")
	fs.IntVar(&o.burstConc, "burst-concurrency", 100, "concurrency of the burst")
	fs.IntVar(&o.nodeRules, "node-rules", 50, "fromRegexp rules of the node plugin whose idle memory is measured (even, at most 200)")
	fs.StringVar(&o.microTime, "benchtime", "1s", "go test -benchtime for the micro-benchmarks")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (configs, sockets, process logs)")
	fs.StringVar(&o.proxyBin, "proxy-bin", "", "use this proxy-topology binary instead of building one")
	fs.StringVar(&o.profile, "profile", "", "instead of measuring, write CPU and allocation profiles of the proxy under load into this directory")
	fs.IntVar(&o.profileSeconds, "profile-seconds", 15, "how long each -profile load runs")
	fs.StringVar(&o.compare, "compare", "", "another proxy-topology binary, measured as one more path (compare) in the same rounds: an A/B test of a change")
	methods := fs.String("methods", "CreateVolume,NodeGetVolumeStats", "methods measured on the paths")
	skip := fs.String("skip", "", "comma-separated parts to leave out, for experiments: c1, c64, probe, burst, scale, micro, realwork")
	only := fs.String("only", "", "run only these comma-separated parts, realwork or micro; -only realwork runs the real-work section alone (results in bench/realwork.json)")
	fs.StringVar(&o.dcsi, "dcsi", dcsiFromEnv(), "democratic-csi checkout (with node_modules) for the real-work peer paths; default $DEMOCRATIC_CSI (or its older name $DEMOCRATIC_CSI_DIR)")
	fs.StringVar(&o.realWorkDir, "realwork-dir", "", "directory on the disk to measure for the real-work section (default: the run's temporary directory)")
	fs.IntVar(&o.realWorkRounds, "realwork-rounds", 8, "interleaved rounds of the real-work section, at each concurrency")
	fs.IntVar(&o.realWorkPairs1, "realwork-pairs1", 100, "CreateVolume+DeleteVolume pairs per path per round at concurrency 1")
	fs.IntVar(&o.realWorkPairs16, "realwork-pairs16", 800, "pairs per path per round at concurrency 16")
	fs.IntVar(&o.realWorkPairs64, "realwork-pairs64", 1600, "pairs per path per round at concurrency 64")
	_ = fs.Parse(args)
	outSet := false
	fs.Visit(func(f *flag.Flag) { outSet = outSet || f.Name == "out" })
	if o.nodeRules < 2 || o.nodeRules%2 != 0 || o.nodeRules > 200 {
		fmt.Fprintln(os.Stderr, "ptbench: -node-rules must be even, from 2 to 200")
		return 2
	}
	o.methods = strings.Split(*methods, ",")
	o.skip = map[string]bool{}
	for _, s := range strings.Split(*skip, ",") {
		if s != "" && !slices.Contains(parts, s) {
			fmt.Fprintf(os.Stderr, "ptbench: -skip %s: no such part (parts: %s)\n", s, strings.Join(parts, ", "))
			return 2
		}
		o.skip[s] = s != ""
	}
	o.only = map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		if s != "" && !slices.Contains(onlyParts, s) {
			fmt.Fprintf(os.Stderr, "ptbench: -only %s: only %s run alone; leave the others out with -skip\n", s, strings.Join(onlyParts, " and "))
			return 2
		}
		if s != "" {
			o.only[s] = true
		}
	}
	if len(o.only) > 0 && !outSet {
		o.out = "bench/" + strings.Join(slices.Sorted(maps.Keys(o.only)), "-") + ".json"
	}

	if o.profile != "" {
		if err := runProfile(o); err != nil {
			fmt.Fprintln(os.Stderr, "ptbench:", err)
			return 1
		}
		return 0
	}
	if root, err := moduleRoot(); err == nil && !filepath.IsAbs(o.out) {
		o.out = filepath.Join(root, o.out)
	}
	res, err := run(o)
	if res != nil {
		printReport(os.Stdout, res)
		if werr := writeJSON(o.out, res); werr != nil {
			fmt.Fprintln(os.Stderr, "ptbench:", werr)
			return 1
		}
		fmt.Printf("results written to %s\n", o.out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ptbench:", err)
		return 1
	}
	for _, t := range res.Reported {
		fmt.Println(t.Line())
	}
	for _, t := range res.Targets {
		fmt.Println(t.Line())
	}
	for _, t := range res.Targets {
		if !t.OK && t.Skipped == "" {
			return 1
		}
	}
	return 0
}

// runContext is a run's context: it ends after 30 minutes, or at SIGINT or
// SIGTERM, so that an interrupted run still stops its servers, unmounts the
// burst's file system and removes its temporary directory.
func runContext() (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	return ctx, func() { cancel(); stop() }
}

// moduleRoot finds the directory holding go.mod, from the working directory
// up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory; run ptbench from the repository")
		}
		dir = parent
	}
}

// setup finds the repository, makes the temporary directory and builds
// the proxy; cleanup removes the directory.
func setup(o *options) (root, dir, bin string, cleanup func(), err error) {
	if root, err = moduleRoot(); err != nil {
		return "", "", "", nil, err
	}
	if dir, err = os.MkdirTemp("", "ptbench-"); err != nil {
		return "", "", "", nil, err
	}
	cleanup = func() { _ = os.RemoveAll(dir) }
	if o.keep {
		fmt.Println("keeping", dir)
		cleanup = func() {}
	}
	build := func(out, pkg string) error {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build %s: %w", pkg, err)
		}
		return nil
	}
	bin = o.proxyBin
	if bin == "" {
		bin = filepath.Join(dir, "proxy-topology")
		fmt.Println("building proxy-topology ...")
		if err := build(bin, "./cmd/proxy-topology"); err != nil {
			cleanup()
			return "", "", "", nil, err
		}
	}
	// The forwarders are binaries of their own (bench/serve says why); the
	// real-work section needs the typed one only.
	kinds := []string{"typed", "raw"}
	if len(o.only) > 0 {
		if !o.runs("realwork") {
			return root, dir, bin, cleanup, nil
		}
		kinds = kinds[:1]
	}
	fmt.Println("building the forwarders:", strings.Join(kinds, ", "), "...")
	for _, kind := range kinds {
		if err := build(forwarderBin(dir, kind), "./bench/cmd/"+kind+"forwarder"); err != nil {
			cleanup()
			return "", "", "", nil, err
		}
	}
	return root, dir, bin, cleanup, nil
}

// forwarderBin is where setup builds the typed or raw forwarder.
func forwarderBin(dir, kind string) string { return filepath.Join(dir, kind+"forwarder") }

func runProfile(o options) error {
	_, dir, bin, cleanup, err := setup(&o)
	if err != nil {
		return err
	}
	defer cleanup()
	ctx, cancel := runContext()
	defer cancel()
	b, err := startBench(ctx, dir, bin, o)
	if err != nil {
		return err
	}
	defer b.stop()
	return b.profile(ctx, o.profile, o.profileSeconds)
}

func run(o options) (*Results, error) {
	res := &Results{Time: time.Now().UTC(), Machine: machineInfo(), Settings: settings(o)}
	fmt.Printf("machine: %d CPUs, %s, %s, load average %s\n", res.Machine.NumCPU, res.Machine.CPUModel, res.Machine.GoVersion, res.Machine.LoadStart)
	if len(o.only) == 0 {
		fmt.Printf("settings: per path, %d rounds x %d calls at c=1 (Probe: x %d), %d rounds x %d calls at c=%d; %d connection files; burst %d rounds x %d pairs at c=%d; %d node rules\n",
			o.rounds1, o.n1, o.probeN, o.rounds64, o.n64, o.conc, o.connections, o.burstRounds, o.burstPairs, o.burstConc, o.nodeRules)
	}
	if o.runs("realwork") {
		fmt.Printf("real work: per path, %d rounds x %d pairs at c=1, x %d at c=16 and x %d at c=64; democratic-csi: %q\n",
			o.realWorkRounds, o.realWorkPairs1, o.realWorkPairs16, o.realWorkPairs64, o.dcsi)
	}
	root, dir, bin, cleanup, err := setup(&o)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	res.Revision = revision(root)
	ctx, cancel := runContext()
	defer cancel()
	if len(o.only) == 0 {
		b, err := startBench(ctx, dir, bin, o)
		if err != nil {
			return nil, err
		}
		defer b.stop()
		if err := b.measure(ctx, res); err != nil {
			return res, err
		}
		b.stop()
	}
	if o.runs("realwork") {
		res.RealWork, err = realWork(ctx, dir, bin, o)
		if err != nil {
			return res, err
		}
	}
	if o.runs("micro") {
		fmt.Println("micro-benchmarks ...")
		res.Micro, err = microBenchmarks(root, o.microTime)
	}
	res.Machine.LoadEnd = loadAvg()
	if len(o.only) == 0 {
		res.Targets, res.Reported = targets(res)
	}
	goals, reports := realWorkTargets(res.RealWork)
	if len(o.only) == 0 || o.only["micro"] {
		goals = append(goals, microTargets(res.Micro)...)
	}
	res.Targets, res.Reported = append(res.Targets, goals...), append(res.Reported, reports...)
	return res, err
}

// revision names the measured source tree, e.g. 5cf45b0-dirty.
func revision(root string) string {
	cmd := exec.Command("git", "describe", "--tags", "--always", "--dirty")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
