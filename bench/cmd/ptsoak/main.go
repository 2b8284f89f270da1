// Command ptsoak edits connection files 10,000 times under load and checks
// that the proxy does not grow: it starts a local-hostpath upstream and the
// real proxy-topology binary, keeps CreateVolume/DeleteVolume/GetCapacity
// load running on two steady connections (one csi, one local-hostpath),
// rewrites four other connection files in turn (csi and local-hostpath,
// stage on and off, so upstream clients and built-in drivers are replaced
// all the time), checks each edit on the next call, and samples the
// proxy's RSS and goroutines from /metrics. It prints the slope of both
// against the number of edits and one line per target:
//
//	target <name>: <value> (goal <op> <goal>) ok|MISS
//
// and exits non-zero when a target is missed. Run it from the repository
// root: go run ./bench/cmd/ptsoak
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const prefix = "org.democratic-csi.topology"

// slopeWindows is how many runs of samples the floor slopes take the
// lowest reading of.
const slopeWindows = 10

type options struct {
	binary   string
	edits    int
	editConn int
	workers  int
	every    time.Duration
	warmup   float64
	keep     bool
	// Goals.
	maxRSSSlope, maxGoroutineSlope float64
}

func main() {
	var o options
	flag.StringVar(&o.binary, "binary", "", "proxy-topology binary; empty: build ./cmd/proxy-topology into a temporary directory")
	// 10,000 edits are measured after 10,000 that settle the heap: at
	// about 100 edits a second the resident set still climbs for the first
	// two minutes (replaced drivers' pipes, the collector's pacing) and then
	// stays flat, which a shorter warm-up mistook for a leak.
	flag.IntVar(&o.edits, "edits", 20000, "connection file edits in all")
	flag.IntVar(&o.editConn, "edited-connections", 4, "connections the edits go round")
	flag.IntVar(&o.workers, "workers", 8, "concurrent callers of the steady connections")
	flag.DurationVar(&o.every, "sample-every", 250*time.Millisecond, "how often RSS and goroutines are sampled")
	flag.Float64Var(&o.warmup, "warmup", 0.5, "share of the edits left out of the slopes (caches and heap settling)")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory")
	flag.Float64Var(&o.maxRSSSlope, "max-rss-slope", 2, "goal: RSS growth at most this many MiB per 1,000 edits (the leak it found grew 155)")
	flag.Float64Var(&o.maxGoroutineSlope, "max-goroutine-slope", 1, "goal: at most this many more goroutines per 1,000 edits")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "ptsoak:", err)
		os.Exit(1)
	}
}

// sample is one reading of the proxy's /metrics.
type sample struct {
	edits      int
	rssMiB     float64
	goroutines float64
	// heapMiB is the heap in use (go_memstats_heap_inuse_bytes): what the
	// program holds, without the pages the runtime keeps or has not yet
	// returned to the system, so its slope tells a leak from slack.
	heapMiB float64
}

func run(o options) error {
	dir, err := os.MkdirTemp("", "ptsoak-")
	if err != nil {
		return err
	}
	if !o.keep {
		defer os.RemoveAll(dir)
	} else {
		fmt.Println("work directory:", dir)
	}
	if o.binary == "" {
		o.binary = filepath.Join(dir, "proxy-topology")
		build := exec.Command("go", "build", "-o", o.binary, "./cmd/proxy-topology")
		build.Stdout, build.Stderr = os.Stdout, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build the binary (run from the repository root, or pass -binary): %w", err)
		}
	}
	connDir := filepath.Join(dir, "connections")
	for _, d := range []string{connDir, filepath.Join(dir, "sock")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return err
		}
	}

	upSock := filepath.Join(dir, "sock", "up.sock")
	upCfg := filepath.Join(dir, "up.yaml")
	if err := os.WriteFile(upCfg, fmt.Appendf(nil, "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\n", filepath.Join(dir, "up")), 0o640); err != nil {
		return err
	}
	up, err := start(o.binary, filepath.Join(dir, "up.log"), "--config", upCfg, "--csi-endpoint", "unix://"+upSock, "--node-id", "soak", "--log-level", "warn")
	if err != nil {
		return err
	}
	defer up.stop()

	metricsAddr, err := freeAddr()
	if err != nil {
		return err
	}
	mainCfg := filepath.Join(dir, "proxy.yaml")
	if err := os.WriteFile(mainCfg, fmt.Appendf(nil, "driver: proxy\nproxy:\n  configFolder: %s\n  cacheTimeoutMinutes: 60\n  nodeTopology:\n    type: cluster\n    prefix: %s\n", connDir, prefix), 0o640); err != nil {
		return err
	}
	s := &soak{o: o, dir: dir, connDir: connDir, upEndpoint: "unix://" + upSock}
	if err := s.write("steady", "driver: csi\ncsi:\n  endpoint: "+s.upEndpoint+"\n"); err != nil {
		return err
	}
	if err := s.write("local", fmt.Sprintf("driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\n", filepath.Join(dir, "local"))); err != nil {
		return err
	}
	for k := range o.editConn {
		if err := s.write(s.editName(k), s.version(k, 0)); err != nil {
			return err
		}
	}
	proxySock := filepath.Join(dir, "sock", "proxy.sock")
	proxy, err := start(o.binary, filepath.Join(dir, "proxy.log"), "--config", mainCfg, "--csi-endpoint", "unix://"+proxySock,
		"--node-id", "soak", "--log-level", "warn", "--metrics-address", metricsAddr)
	if err != nil {
		return err
	}
	defer proxy.stop()
	conn, err := grpc.NewClient("unix://"+proxySock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	s.ctrl = csi.NewControllerClient(conn)
	s.metricsURL = "http://" + metricsAddr + "/metrics"
	if err := s.waitReady(csi.NewIdentityClient(conn)); err != nil {
		return err
	}
	for k := range o.editConn {
		if err := s.check(k, 0); err != nil {
			return fmt.Errorf("before the edits: %w", err)
		}
	}
	return s.run()
}

type soak struct {
	o                   options
	dir, connDir        string
	upEndpoint          string
	metricsURL          string
	ctrl                csi.ControllerClient
	edits               atomic.Int64
	loadCalls, loadErrs atomic.Int64
	editErrs            atomic.Int64
	mu                  sync.Mutex
	firstErrs           []string
}

func (s *soak) editName(k int) string { return fmt.Sprintf("edit-%d", k) }

// version is edited connection k's version v: one in ten is local-hostpath
// with stage true, one in ten the same base path with stage false, the rest
// csi to the upstream; each offers its own zone, so a call can tell which
// version served it.
func (s *soak) version(k, v int) string {
	topology := fmt.Sprintf("proxy:\n  perDriver:\n    topology:\n    - requirements:\n        zone: e%d\n", v)
	switch v % 10 {
	case 0, 5:
		return fmt.Sprintf("driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\n  stage: %t\n%s",
			filepath.Join(s.dir, s.editName(k)), v%10 == 0, topology)
	}
	return "driver: csi\ncsi:\n  endpoint: " + s.upEndpoint + "\n" + topology
}

// write replaces a connection file by a rename.
func (s *soak) write(name, content string) error {
	tmp := filepath.Join(s.connDir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o640); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(s.connDir, name+".yaml"))
}

// check asks edited connection k for capacity in version v's zone: only
// version v has it.
func (s *soak) check(k, v int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := s.ctrl.GetCapacity(ctx, &csi.GetCapacityRequest{
		Parameters:         map[string]string{"connection": s.editName(k)},
		AccessibleTopology: &csi.Topology{Segments: map[string]string{prefix + "/zone": "e" + strconv.Itoa(v)}},
	})
	if err != nil {
		return fmt.Errorf("%s version %d: %w", s.editName(k), v, err)
	}
	if resp.GetAvailableCapacity() == 0 {
		return fmt.Errorf("%s version %d: the next call was served by an older version", s.editName(k), v)
	}
	return nil
}

func (s *soak) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.firstErrs) < 10 {
		s.firstErrs = append(s.firstErrs, err.Error())
	}
}

func (s *soak) waitReady(id csi.IdentityClient) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := id.Probe(ctx, &csi.ProbeRequest{}, grpc.WaitForReady(true))
		cancel()
		if err == nil && resp.GetReady().GetValue() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the proxy is not ready after 30s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *soak) run() error {
	// Every steady connection has its client before the first sample.
	for _, conn := range []string{"steady", "local"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := s.loadOnce(ctx, "soak-warm-"+conn, conn)
		cancel()
		if err != nil {
			return fmt.Errorf("%s before the edits: %w", conn, err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range s.o.workers {
		conn := []string{"steady", "local"}[w%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.load(stop, w, conn)
		}()
	}
	var samples []sample
	var sampleErr error
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(s.o.every)
		defer tick.Stop()
		for {
			sm, err := s.sample()
			if err != nil {
				sampleErr = err
				return
			}
			samples = append(samples, sm)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()

	begin := time.Now()
	for i := range s.o.edits {
		k, v := i%s.o.editConn, i/s.o.editConn+1
		if err := s.write(s.editName(k), s.version(k, v)); err != nil {
			return err
		}
		if err := s.check(k, v); err != nil {
			s.editErrs.Add(1)
			s.fail(err)
		}
		s.edits.Add(1)
	}
	elapsed := time.Since(begin)
	// Let what the last edits replaced close, then take the last sample,
	// under load as every other one.
	time.Sleep(2 * time.Second)
	last, err := s.sample()
	close(stop)
	wg.Wait()
	<-sampled
	if sampleErr != nil {
		return sampleErr
	}
	if err != nil {
		return err
	}
	samples = append(samples, last)

	from := int(s.o.warmup * float64(s.o.edits))
	var xs, rss, gor, heap []float64
	for _, sm := range samples {
		if sm.edits >= from {
			xs = append(xs, float64(sm.edits)/1000)
			rss = append(rss, sm.rssMiB)
			gor = append(gor, sm.goroutines)
			heap = append(heap, sm.heapMiB)
		}
	}
	if len(xs) < 3 {
		return fmt.Errorf("only %d samples after the warm-up; lower -sample-every", len(xs))
	}
	// The first sample after the warm-up: every connection loaded, the
	// load running.
	var first sample
	for _, sm := range samples {
		if sm.edits >= from {
			first = sm
			break
		}
	}
	rssSlope, gorSlope := floorSlope(xs, rss, slopeWindows), floorSlope(xs, gor, slopeWindows)
	fmt.Printf("%d edits of %d connections in %v (%.0f/s), %d load calls (%d failed), %d edits not seen by the next call\n",
		s.o.edits, s.o.editConn, elapsed.Round(time.Millisecond), float64(s.o.edits)/elapsed.Seconds(), s.loadCalls.Load(), s.loadErrs.Load(), s.editErrs.Load())
	fmt.Printf("RSS %.1f MiB after %d warm-up edits, %.1f MiB at the end; slope of the floor %+.3f MiB per 1,000 edits (lowest of each of %d windows; of all %d samples %+.3f)\n",
		first.rssMiB, from, last.rssMiB, rssSlope, slopeWindows, len(xs), slope(xs, rss))
	fmt.Printf("goroutines %.0f after the warm-up, %.0f at the end; slope of the floor %+.3f per 1,000 edits (of all samples %+.3f)\n",
		first.goroutines, last.goroutines, gorSlope, slope(xs, gor))
	fmt.Printf("heap in use %.1f MiB after the warm-up, %.1f MiB at the end; slope %+.3f MiB per 1,000 edits (reported, no goal)\n",
		first.heapMiB, last.heapMiB, slope(xs, heap))
	for _, e := range s.firstErrs {
		fmt.Println("error:", e)
	}
	targets := []target{
		{"soak_rss_slope", rssSlope, "MiB/1k edits", "<=", s.o.maxRSSSlope},
		{"soak_goroutine_slope", gorSlope, "/1k edits", "<=", s.o.maxGoroutineSlope},
		{"soak_errors", float64(s.loadErrs.Load() + s.editErrs.Load()), "errors", "<=", 0},
	}
	missed := 0
	for _, t := range targets {
		fmt.Println(t.line())
		if !t.ok() {
			missed++
		}
	}
	if missed > 0 {
		return fmt.Errorf("%d targets missed", missed)
	}
	return nil
}

// load creates, sizes and deletes volumes on conn until stop.
func (s *soak) load(stop <-chan struct{}, w int, conn string) {
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := s.loadOnce(ctx, fmt.Sprintf("soak-%d-%d", w, n), conn)
		cancel()
		s.loadCalls.Add(3)
		if err != nil {
			s.loadErrs.Add(1)
			s.fail(fmt.Errorf("%s: %w", conn, err))
		}
	}
}

func (s *soak) loadOnce(ctx context.Context, name, conn string) error {
	params := map[string]string{"connection": conn}
	resp, err := s.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: name, Parameters: params, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}},
	})
	if err != nil {
		return fmt.Errorf("CreateVolume: %w", err)
	}
	if _, err := s.ctrl.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: params}); err != nil {
		return fmt.Errorf("GetCapacity: %w", err)
	}
	if _, err := s.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: resp.GetVolume().GetVolumeId()}); err != nil {
		return fmt.Errorf("DeleteVolume: %w", err)
	}
	return nil
}

// sample reads RSS and goroutines from the proxy's /metrics.
func (s *soak) sample() (sample, error) {
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(s.metricsURL)
	if err != nil {
		return sample{}, err
	}
	defer resp.Body.Close()
	sm := sample{edits: int(s.edits.Load())}
	found := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch name {
		case "process_resident_memory_bytes":
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return sample{}, err
			}
			sm.rssMiB = v / (1 << 20)
			found++
		case "go_memstats_heap_inuse_bytes":
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return sample{}, err
			}
			sm.heapMiB = v / (1 << 20)
		case "go_goroutines":
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return sample{}, err
			}
			sm.goroutines = v
			found++
		}
	}
	if found != 2 {
		return sample{}, errors.New("/metrics lacks process_resident_memory_bytes or go_goroutines")
	}
	return sm, sc.Err()
}

// floorSlope is the slope of the lowest y in each of windows equal runs of
// the samples. The runtime returns freed pages to the system lazily and a
// replaced built-in driver's pipes stay reachable for seconds, so the
// resident set is a sawtooth whose peaks depend on when the collector ran;
// a leak raises the floor the sawtooth falls back to, churn does not.
func floorSlope(xs, ys []float64, windows int) float64 {
	if len(xs) < 2*windows {
		return slope(xs, ys)
	}
	var fx, fy []float64
	size := len(xs) / windows
	for w := range windows {
		lo, hi := w*size, (w+1)*size
		if w == windows-1 {
			hi = len(xs)
		}
		minI := lo
		for i := lo; i < hi; i++ {
			if ys[i] < ys[minI] {
				minI = i
			}
		}
		fx, fy = append(fx, xs[minI]), append(fy, ys[minI])
	}
	return slope(fx, fy)
}

// slope is the least-squares slope of ys over xs.
func slope(xs, ys []float64) float64 {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// target is one goal of the soak.
type target struct {
	name  string
	value float64
	unit  string
	op    string
	goal  float64
}

func (t target) ok() bool {
	if t.op == ">=" {
		return t.value >= t.goal
	}
	return t.value <= t.goal
}

// line renders "target <name>: <value> (goal <op> <goal>) ok|MISS", as
// ptbench does.
func (t target) line() string {
	verdict := "ok"
	if !t.ok() {
		verdict = "MISS"
	}
	return fmt.Sprintf("target %s: %.3f %s (goal %s %.3f %s) %s", t.name, t.value, t.unit, t.op, t.goal, t.unit, verdict)
}

// proc is a started proxy-topology process.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func start(binary, logPath string, args ...string) (*proc, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, append([]string{"serve"}, args...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// stop sends SIGTERM and waits up to 15s, then kills.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// freeAddr returns a loopback address with a port free now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
