package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/democratic-csi/proxy-topology/bench/load"
	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
)

// The real-work section: CreateVolume+DeleteVolume pairs that
// make and remove real directories on the run's own disk, at concurrency 1
// and 16, against
//
//   - builtin-proxy: proxy-topology with a local-hostpath connection (the
//     built-in driver, in process);
//   - builtin-direct: the built-in driver served on its own;
//   - csi-proxy: proxy-topology with a `driver: csi` connection to an
//     upstream: democratic-csi's local-hostpath when a checkout is given,
//     else builtin-direct;
//   - csi-typed: the typed forwarder (bench/typedproxy) in front of the
//     same upstream: the floor csi-proxy is measured against, as the
//     micro paths are;
//   - builtin-tmpfs: builtin-proxy with its base path on /dev/shm (tmpfs),
//     to show what the disk costs (reported, no goal);
//   - dcsi-direct and dcsi-proxy: democratic-csi's local-hostpath, served
//     on its own and through democratic-csi's own proxy driver, when a
//     checkout is given (-dcsi or DEMOCRATIC_CSI);
//   - compare: builtin-proxy served by the -compare binary, for A/B tests.
//
// All paths run in interleaved rounds, so load from other processes falls
// on every path alike and cancels in the ratios.

// RealWork is the real-work section of bench/results.json.
type RealWork struct {
	// Dir holds the base paths of the disk-backed paths; FS is its file
	// system type and Device the device it is on.
	Dir    string `json:"dir"`
	FS     string `json:"fs"`
	Device string `json:"device,omitempty"`
	// Peer is the democratic-csi checkout's folder name (not its path, which
	// is the machine's), PeerRevision what it is;
	// SkipReason says why the peer paths did not run; NoPeerProxy why
	// dcsi-proxy alone did not (a checkout without democratic-csi's proxy
	// driver still runs dcsi-direct and the proxies in front of it).
	Peer         string `json:"peer,omitempty"`
	PeerRevision string `json:"peer_revision,omitempty"`
	SkipReason   string `json:"skip_reason,omitempty"`
	NoPeerProxy  string `json:"no_peer_proxy,omitempty"`
	// Upstream is what csi-proxy forwards to.
	Upstream string       `json:"upstream"`
	Rows     []PathResult `json:"rows"`
	Errors   int64        `json:"errors"`
	First    string       `json:"first_error,omitempty"`
	// Left counts volume directories left under the base paths after the
	// rounds (every pair deletes what it made).
	Left int `json:"volumes_left"`
	// RSSKiB is each serving process's VmRSS after its pairs; PairsServed
	// how many pairs it had served by then.
	RSSKiB map[string]int64 `json:"rss_kib"`
	// StateOps are the built-in driver's fsyncs and directory operations
	// (its metrics) per create, at each concurrency: everything a pair
	// did, its delete's too, over the creates.
	StateOps    []StateOps     `json:"state_ops,omitempty"`
	PairsServed map[string]int `json:"pairs_served"`
}

const (
	rwConn    = "rw"    // the connection name in every proxy
	rwUpConn  = "rwcsi" // proxy-topology's driver: csi connection
	dcsiName  = "org.democratic-csi.local-hostpath"
	dcsiProxy = "org.democratic-csi.proxy"
)

// dcsiFromEnv is the democratic-csi checkout the environment names:
// DEMOCRATIC_CSI (make interop's name too), else DEMOCRATIC_CSI_DIR (the
// name make bench used first).
func dcsiFromEnv() string {
	if dir := os.Getenv("DEMOCRATIC_CSI"); dir != "" {
		return dir
	}
	return os.Getenv("DEMOCRATIC_CSI_DIR")
}

// tmpfsSkip is why the real-work goals are skipped on tmpfs.
const tmpfsSkip = "base path is tmpfs (no disk)"

// realWorkPaths are the path names in the order they are measured.
var realWorkPaths = []string{"builtin-proxy", "compare", "builtin-direct", "csi-proxy", "csi-typed", "builtin-tmpfs", "dcsi-direct", "dcsi-proxy"}

// realWork runs the section with its own processes under dir (on the run's
// disk; o.realWorkDir overrides it).
func realWork(ctx context.Context, dir, bin string, o options) (rw *RealWork, err error) {
	base := filepath.Join(dir, "realwork")
	if o.realWorkDir != "" {
		if base, err = os.MkdirTemp(o.realWorkDir, "ptbench-realwork-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(base)
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, err
	}
	rw = &RealWork{Dir: base, RSSKiB: map[string]int64{}, PairsServed: map[string]int{}}
	rw.FS, rw.Device = fsOf(base)
	if rw.FS == "tmpfs" {
		fmt.Printf("real work: WARNING %s is on tmpfs, not a disk: the targets are skipped; pass -realwork-dir DIR on a disk\n", base)
	}
	peer := o.dcsi
	switch {
	case peer == "":
		rw.SkipReason = "no democratic-csi checkout given (-dcsi DIR or DEMOCRATIC_CSI)"
	default:
		if _, err := os.Stat(filepath.Join(peer, "bin", "democratic-csi")); err != nil {
			rw.SkipReason = fmt.Sprintf("%s is not a democratic-csi checkout: %v", filepath.Base(peer), errors.Unwrap(err))
		} else if _, err := os.Stat(filepath.Join(peer, "node_modules")); err != nil {
			rw.SkipReason = fmt.Sprintf("%s has no node_modules: run npm install there", filepath.Base(peer))
		} else if _, err := exec.LookPath("node"); err != nil {
			rw.SkipReason = "node is not installed"
		} else {
			rw.Peer = filepath.Base(peer)
			rw.PeerRevision = peerRevision(peer)
			if _, err := os.Stat(filepath.Join(peer, "src", "driver", "controller-proxy")); err != nil {
				rw.NoPeerProxy = "no proxy driver in the checkout (src/driver/controller-proxy, democratic-csi pull request 466)"
			}
		}
	}

	var procs []*proc
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	startProc := func(name string, env []string, argv ...string) (*proc, error) {
		p, err := start(ctx, dir, "rw-"+name, filepath.Join(dir, "rw-"+name+".sock"), env, argv...)
		if err == nil {
			procs = append(procs, p)
		}
		return p, err
	}
	// metrics: the metrics address of the paths whose built-in driver's
	// fsyncs and directory operations are counted.
	metrics := map[string]string{}
	serve := func(name, cfg string) (*proc, error) {
		argv := []string{bin, "serve", "--config", cfg, "--csi-endpoint", "unix://" + filepath.Join(dir, "rw-"+name+".sock"),
			"--mode", "controller", "--log-level", "warn", "--node-id", "bench-node"}
		if name == "builtin-proxy" || name == "builtin-direct" {
			addr, err := freeAddr()
			if err != nil {
				return nil, err
			}
			argv = append(argv, "--metrics-address", addr)
			metrics[name] = addr
		}
		return startProc(name, nil, argv...)
	}
	// proxyTo writes a proxy-topology main config whose one connection rw
	// has the content conn.
	proxyTo := func(name, conn string) (string, error) {
		folder := filepath.Join(base, name, "connections")
		if err := writeFile(filepath.Join(folder, rwConn+".yaml"), conn); err != nil {
			return "", err
		}
		// Node topology type node: local-hostpath storage is node-local,
		// and the proxy pins its volumes to the node (democratic-csi's
		// proxy asks the same of local drivers).
		cfg := filepath.Join(base, name, "proxy.yaml")
		return cfg, writeFile(cfg, fmt.Sprintf("driver: proxy\nproxy:\n  configFolder: %s\n  nodeTopology:\n    type: node\n", folder))
	}
	hostpathConn := func(data string) string {
		return fmt.Sprintf("driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\n", data)
	}
	type path struct {
		name string
		p    *proc
		data string // where its volumes are made
	}
	var paths []path
	add := func(name string, p *proc, data string) { paths = append(paths, path{name, p, data}) }

	cfg, err := proxyTo("builtin-proxy", hostpathConn(filepath.Join(base, "builtin-proxy", "data")))
	if err != nil {
		return rw, err
	}
	p, err := serve("builtin-proxy", cfg)
	if err != nil {
		return rw, err
	}
	add("builtin-proxy", p, filepath.Join(base, "builtin-proxy", "data", "volumes"))

	cfg = filepath.Join(base, "builtin-direct", "main.yaml")
	if err := writeFile(cfg, hostpathConn(filepath.Join(base, "builtin-direct", "data"))); err != nil {
		return rw, err
	}
	direct, err := serve("builtin-direct", cfg)
	if err != nil {
		return rw, err
	}
	add("builtin-direct", direct, filepath.Join(base, "builtin-direct", "data", "volumes"))

	upstream, upData := direct, filepath.Join(base, "builtin-direct", "data", "volumes")
	rw.Upstream = "built-in local-hostpath, served on its own (builtin-direct)"
	// node serves democratic-csi with the driver config cfg; dcsiConfig is
	// its local-hostpath config with the volumes under data.
	node := func(name, cfg, csiName string) (*proc, error) {
		sock := filepath.Join(dir, "rw-"+name+".sock")
		return startProc(name, []string{"CSI_NODE_ID=bench-node", "NODE_NAME=bench-node"},
			"node", filepath.Join(peer, "bin", "democratic-csi"), "--csi-version=1.5.0", "--csi-name="+csiName,
			"--driver-config-file="+cfg, "--log-level=error", "--csi-mode=controller", "--server-socket="+sock)
	}
	dcsiConfig := func(data string) string {
		return fmt.Sprintf("driver: local-hostpath\ninstance_id:\nlocal-hostpath:\n  shareBasePath: %s\n  controllerBasePath: %s\n  dirPermissionsMode: \"0777\"\n  dirPermissionsUser: 0\n  dirPermissionsGroup: 0\n", data, data)
	}
	if rw.Peer != "" {
		data := filepath.Join(base, "dcsi-direct", "data")
		cfg := filepath.Join(base, "dcsi-direct", "local-hostpath.yaml")
		if err := writeFile(cfg, dcsiConfig(data)); err != nil {
			return rw, err
		}
		dcsiDirect, err := node("dcsi-direct", cfg, dcsiName)
		if err != nil {
			return rw, err
		}
		add("dcsi-direct", dcsiDirect, filepath.Join(data, "v"))
		upstream, upData = dcsiDirect, filepath.Join(data, "v")
		rw.Upstream = "democratic-csi local-hostpath (dcsi-direct)"
	}
	if rw.Peer != "" && rw.NoPeerProxy == "" {
		folder := filepath.Join(base, "dcsi-proxy", "connections")
		pdata := filepath.Join(base, "dcsi-proxy", "data")
		if err := writeFile(filepath.Join(folder, rwConn+".yaml"), dcsiConfig(pdata)); err != nil {
			return rw, err
		}
		cfg = filepath.Join(base, "dcsi-proxy", "proxy.yaml")
		if err := writeFile(cfg, fmt.Sprintf("driver: proxy\nproxy:\n  configFolder: %s\n  nodeTopology:\n    type: node\n", folder)); err != nil {
			return rw, err
		}
		dp, err := node("dcsi-proxy", cfg, dcsiProxy)
		if err != nil {
			return rw, err
		}
		add("dcsi-proxy", dp, filepath.Join(pdata, "v"))
	}

	cfg, err = proxyTo("csi-proxy", fmt.Sprintf("driver: csi\ncsi:\n  endpoint: unix://%s\n", upstream.sock))
	if err != nil {
		return rw, err
	}
	if p, err = serve("csi-proxy", cfg); err != nil {
		return rw, err
	}
	add("csi-proxy", p, upData)
	typedSock := filepath.Join(dir, "rw-csi-typed.sock")
	if p, err = startProc("csi-typed", nil, forwarderBin(dir, "typed"), "-listen", typedSock, "-upstream", "unix://"+upstream.sock); err != nil {
		return rw, err
	}
	add("csi-typed", p, upData)

	if o.compare != "" {
		// -compare: another proxy-topology binary with the same kind of
		// connection, its own base path, measured in the same rounds.
		cfg, err := proxyTo("compare", hostpathConn(filepath.Join(base, "compare", "data")))
		if err != nil {
			return rw, err
		}
		cp, err := startProc("compare", nil, o.compare, "serve", "--config", cfg, "--csi-endpoint", "unix://"+filepath.Join(dir, "rw-compare.sock"),
			"--mode", "controller", "--log-level", "warn", "--node-id", "bench-node")
		if err != nil {
			return rw, err
		}
		add("compare", cp, filepath.Join(base, "compare", "data", "volumes"))
	}
	if fs, _ := fsOf("/dev/shm"); fs == "tmpfs" {
		shm, err := os.MkdirTemp("/dev/shm", "ptbench-realwork-")
		if err != nil {
			return rw, err
		}
		defer os.RemoveAll(shm)
		cfg, err := proxyTo("builtin-tmpfs", hostpathConn(shm))
		if err != nil {
			return rw, err
		}
		if p, err = serve("builtin-tmpfs", cfg); err != nil {
			return rw, err
		}
		add("builtin-tmpfs", p, filepath.Join(shm, "volumes"))
	}
	// Order the paths as realWorkPaths, so that tables read the same in
	// every run.
	var ordered []path
	for _, name := range realWorkPaths {
		for _, p := range paths {
			if p.name == name {
				ordered = append(ordered, p)
			}
		}
	}
	paths = ordered

	var c burstCounter
	for _, conc := range []int{1, 16, 64} {
		rounds, n := o.realWorkRounds, o.realWorkPairs1
		switch conc {
		case 16:
			n = o.realWorkPairs16
		case 64:
			n = o.realWorkPairs64
		}
		type counts struct{ fsyncs, dirOps float64 }
		before := map[string]counts{}
		for name, addr := range metrics {
			f, d, err := stateCounters(addr)
			if err != nil {
				return rw, err
			}
			before[name] = counts{f, d}
		}
		var lp []load.Path
		for _, p := range paths {
			lp = append(lp, load.Path{Name: p.name, Call: realPair(&c, p.p, p.name, conc), CPU: p.p.cpu})
		}
		fmt.Printf("real work c=%d: %d rounds x %d pairs x %d paths ...\n", conc, rounds, n, len(lp))
		samples, err := load.Rounds(ctx, lp, rounds, conc, n)
		if err != nil {
			return rw, fmt.Errorf("real work: %w", err)
		}
		for _, p := range paths {
			rw.Rows = append(rw.Rows, PathResult{Method: "CreateVolume+DeleteVolume", Concurrency: conc, Path: p.name, Stats: samples[p.name].Summarize()})
			rw.PairsServed[p.name] += (rounds + 1) * n
		}
		for _, name := range []string{"builtin-proxy", "builtin-direct"} {
			addr, ok := metrics[name]
			if !ok {
				continue
			}
			f, d, err := stateCounters(addr)
			if err != nil {
				return rw, err
			}
			pairs := (rounds + 1) * n // with the unrecorded warm-up chunk
			rw.StateOps = append(rw.StateOps, StateOps{Path: name, Concurrency: conc, Pairs: pairs,
				FsyncsPerCreate: (f - before[name].fsyncs) / float64(pairs), DirOpsPerCreate: (d - before[name].dirOps) / float64(pairs)})
		}
	}
	rw.Errors, rw.First = c.errors.Load(), c.first
	seen := map[*proc]bool{}
	for _, p := range paths {
		if kib, err := settledRSS(p.p.pid()); err == nil {
			rw.RSSKiB[p.name] = kib
		}
		if seen[p.p] {
			continue
		}
		seen[p.p] = true
		entries, _ := os.ReadDir(p.data)
		rw.Left += len(entries)
		// The built-in driver makes an empty volume's directory at first
		// use: what it still records counts too.
		if vols, err := hostpath.VolumesAt(filepath.Dir(p.data)); err == nil {
			rw.Left += len(vols)
		}
	}
	return rw, nil
}

// StateOps is what the built-in driver of one path did per create.
type StateOps struct {
	Path            string  `json:"path"`
	Concurrency     int     `json:"concurrency"`
	Pairs           int     `json:"pairs"`
	FsyncsPerCreate float64 `json:"fsyncs_per_create"`
	DirOpsPerCreate float64 `json:"dir_ops_per_create"`
}

// freeAddr is a loopback address with a port nothing listens on now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// stateCounters reads the built-in driver's counters from a proxy's
// metrics.
func stateCounters(addr string) (fsyncs, dirOps float64, err error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, err
	}
	found := 0
	for _, line := range strings.Split(string(b), "\n") {
		name, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		var dst *float64
		switch name {
		case "proxy_topology_local_hostpath_fsyncs_total":
			dst = &fsyncs
		case "proxy_topology_local_hostpath_directory_operations_total":
			dst = &dirOps
		default:
			continue
		}
		if *dst, err = strconv.ParseFloat(v, 64); err != nil {
			return 0, 0, err
		}
		found++
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("%s/metrics has no local-hostpath counters", addr)
	}
	return fsyncs, dirOps, nil
}

// rwCap is a filesystem volume without an fs_type: a directory has none,
// and democratic-csi's local-hostpath refuses any.
var rwCap = []*csi.VolumeCapability{{
	AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
	AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
}}

// rwNodeTerm is what the external-provisioner sends in strict mode for a
// pod placed on bench-node, whose proxies report <prefix>/node.
var rwNodeTerm = &csi.TopologyRequirement{
	Requisite: []*csi.Topology{{Segments: map[string]string{prefix + "/node": "bench-node"}}},
	Preferred: []*csi.Topology{{Segments: map[string]string{prefix + "/node": "bench-node"}}},
}

// realPair creates a volume and deletes it again, both on p: the request
// of a WaitForFirstConsumer class in strict-topology mode, as
// docs/kubernetes.md recommends for node-local storage (requisite =
// preferred = the selected node, bench-node, the node every path runs
// on), with the parameters the external-provisioner adds. The proxies pin
// the volume to that node; the drivers served directly ignore the terms.
// (A request with no topology, an Immediate class's, is refused by the
// proxy in front of democratic-csi: its answer names a node the request
// does not, and the proxy never widens it; SPEC §8.) Names are distinct
// per path and concurrency.
func realPair(c *burstCounter, p *proc, path string, conc int) load.Call {
	client := csi.NewControllerClient(p.conn)
	return func(ctx context.Context, i int) error {
		name := fmt.Sprintf("pvc-rw-%s-c%d-%07d", path, conc, i)
		resp, err := client.CreateVolume(ctx, &csi.CreateVolumeRequest{
			Name:               name,
			CapacityRange:      &csi.CapacityRange{RequiredBytes: 1 << 30},
			VolumeCapabilities: rwCap,
			Parameters: map[string]string{
				"connection":                       rwConn,
				"csi.storage.k8s.io/pvc/name":      "data-postgres-0",
				"csi.storage.k8s.io/pvc/namespace": "default",
				"csi.storage.k8s.io/pv/name":       name,
			},
			AccessibilityRequirements: rwNodeTerm,
		})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			c.fail(fmt.Errorf("%s: CreateVolume %s: %w", path, name, err))
			return nil
		}
		if _, err := client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: resp.GetVolume().GetVolumeId()}); err != nil && ctx.Err() == nil {
			c.fail(fmt.Errorf("%s: DeleteVolume %s: %w", path, resp.GetVolume().GetVolumeId(), err))
		}
		return nil
	}
}

// fsOf names the file system type of path (from statfs) and its device
// (from /proc/self/mountinfo, the longest mount point above path).
func fsOf(path string) (fsType, device string) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return "unknown (" + err.Error() + ")", ""
	}
	switch st.Type {
	case unix.EXT4_SUPER_MAGIC:
		fsType = "ext4" // also ext2/ext3: one magic
	case unix.XFS_SUPER_MAGIC:
		fsType = "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		fsType = "btrfs"
	case unix.TMPFS_MAGIC:
		fsType = "tmpfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		fsType = "overlay"
	default:
		fsType = fmt.Sprintf("0x%x", st.Type)
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fsType, ""
	}
	best := ""
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 {
			continue
		}
		mp := f[4]
		if (path == mp || strings.HasPrefix(path, strings.TrimSuffix(mp, "/")+"/")) && len(mp) >= len(best) {
			best = mp
			for i, x := range f {
				if x == "-" && i+2 < len(f) {
					device = f[i+2]
				}
			}
		}
	}
	return fsType, device
}

// peerRevision describes the democratic-csi checkout: package.json's
// version, and the git commit when it is a clone.
func peerRevision(dir string) string {
	version := "?"
	if data, err := os.ReadFile(filepath.Join(dir, "package.json")); err == nil {
		if i := strings.Index(string(data), `"version": "`); i >= 0 {
			rest := string(data)[i+len(`"version": "`):]
			version = rest[:strings.IndexByte(rest, '"')]
		}
	}
	if out, err := exec.Command("git", "-C", dir, "rev-parse", "--short", "HEAD").Output(); err == nil {
		return version + " " + strings.TrimSpace(string(out))
	}
	return version
}

// realWorkTargets are the real-work goals. The peer targets are skipped,
// with the reason, when democratic-csi did not run. The proxy in front of
// an upstream is held to the typed forwarder in front of the same
// upstream in the same rounds, as the micro paths are; its ratio to the
// upstream served directly is reported beside it. Without democratic-csi
// the upstream is the built-in driver, and both are reported with no goal.
func realWorkTargets(rw *RealWork) (goals, reports []Target) {
	if rw == nil {
		return nil, nil
	}
	pair := "CreateVolume+DeleteVolume"
	row := func(c int, path string) load.Stats { return find(rw.Rows, pair, c, path) }
	// The goals compare work on a disk: on tmpfs there is none to compare
	// (a run there says so instead of a verdict), and without the peer
	// there is nothing to compare with.
	skip := func(t Target) Target {
		switch {
		case rw.FS == "tmpfs":
			t.Skipped, t.OK, t.NotMeasured = tmpfsSkip, false, false
		case rw.Peer == "":
			t.Skipped, t.OK, t.NotMeasured = rw.SkipReason, false, false
		}
		return t
	}
	bp1, dd1 := row(1, "builtin-proxy"), row(1, "dcsi-direct")
	bp16, dd16 := row(16, "builtin-proxy"), row(16, "dcsi-direct")
	bp64, dd64 := row(64, "builtin-proxy"), row(64, "dcsi-direct")
	cp16, ct16 := row(16, "csi-proxy"), row(16, "csi-typed")
	rss := math.NaN()
	if d := rw.RSSKiB["dcsi-direct"]; d > 0 && rw.RSSKiB["builtin-proxy"] > 0 {
		rss = float64(rw.RSSKiB["builtin-proxy"]) / float64(d)
	}
	errs := float64(rw.Errors + int64(rw.Left))
	goals = []Target{
		skip(target("realwork_c1_pair_p50_builtin_proxy_over_dcsi_direct", ratio(bp1.P50us, dd1.P50us), "", "<=", 0.8)),
		skip(target("realwork_c16_pairs_per_s_builtin_proxy_over_dcsi_direct", ratio(bp16.Throughput, dd16.Throughput), "", ">=", 2.0)),
		skip(target("realwork_c64_pairs_per_s_builtin_proxy_over_dcsi_direct", ratio(bp64.Throughput, dd64.Throughput), "", ">=", 2.5)),
		skip(target("realwork_c16_pairs_per_s_proxy_csi_over_typed", ratio(cp16.Throughput, ct16.Throughput), "", ">=", 0.90)),
		skip(target("realwork_rss_proxy_over_dcsi_after_pairs", rss, "", "<=", 0.33)),
		target("realwork_errors", errs, "errors", "<=", 0),
	}
	if f := stateOps(rw, "builtin-proxy", 16); !math.IsNaN(f) {
		goals = append(goals, target("realwork_c16_fsyncs_per_create_builtin_proxy", f, "", "<=", 0.5))
	}
	for _, s := range rw.StateOps {
		reports = append(reports,
			reported(fmt.Sprintf("realwork_c%d_fsyncs_per_create_%s", s.Concurrency, strings.ReplaceAll(s.Path, "-", "_")), s.FsyncsPerCreate),
			reported(fmt.Sprintf("realwork_c%d_dir_ops_per_create_%s", s.Concurrency, strings.ReplaceAll(s.Path, "-", "_")), s.DirOpsPerCreate))
	}
	// The built-in driver behind the proxy is also held up to itself
	// served on its own; beside the goals against democratic-csi, that
	// driver's own ratios say whether a miss is the disk's or the proxy's.
	bd1, bd16, bd64 := row(1, "builtin-direct"), row(16, "builtin-direct"), row(64, "builtin-direct")
	if rw.Peer == "" {
		reports = append(reports,
			reported("realwork_c16_pairs_per_s_proxy_csi_over_typed_builtin_upstream", ratio(cp16.Throughput, ct16.Throughput)),
			reported("realwork_c16_pairs_per_s_proxy_csi_over_builtin_direct", ratio(cp16.Throughput, bd16.Throughput)))
	} else {
		reports = append(reports,
			reported("realwork_c16_pairs_per_s_proxy_csi_over_dcsi_direct", ratio(cp16.Throughput, dd16.Throughput)),
			reported("realwork_c16_pairs_per_s_typed_over_dcsi_direct", ratio(ct16.Throughput, dd16.Throughput)),
			reported("realwork_c1_pair_p50_builtin_direct_over_dcsi_direct", ratio(bd1.P50us, dd1.P50us)),
			reported("realwork_c16_pairs_per_s_builtin_direct_over_dcsi_direct", ratio(bd16.Throughput, dd16.Throughput)))
	}
	reports = append(reports,
		reported("realwork_c1_pair_p50_builtin_proxy_over_builtin_direct", ratio(bp1.P50us, bd1.P50us)),
		reported("realwork_c16_pairs_per_s_builtin_proxy_over_builtin_direct", ratio(bp16.Throughput, bd16.Throughput)),
		reported("realwork_c64_pairs_per_s_builtin_proxy_over_builtin_direct", ratio(bp64.Throughput, bd64.Throughput)))
	if cm1, cm16, cm64 := row(1, "compare"), row(16, "compare"), row(64, "compare"); cm16.N > 0 {
		// -compare: this build's built-in driver against the other one's,
		// the before/after of a change, in the same rounds.
		reports = append(reports,
			reported("realwork_c1_pair_p50_builtin_proxy_over_compare", ratio(bp1.P50us, cm1.P50us)),
			reported("realwork_c16_pairs_per_s_builtin_proxy_over_compare", ratio(bp16.Throughput, cm16.Throughput)),
			reported("realwork_c64_pairs_per_s_builtin_proxy_over_compare", ratio(bp64.Throughput, cm64.Throughput)))
		if dd1.N > 0 {
			reports = append(reports,
				reported("realwork_c1_pair_p50_compare_over_dcsi_direct", ratio(cm1.P50us, dd1.P50us)),
				reported("realwork_c16_pairs_per_s_compare_over_dcsi_direct", ratio(cm16.Throughput, dd16.Throughput)),
				reported("realwork_c64_pairs_per_s_compare_over_dcsi_direct", ratio(cm64.Throughput, dd64.Throughput)))
		}
	}
	return goals, reports
}

// stateOps is the fsyncs per create of path at conc, NaN when not counted.
func stateOps(rw *RealWork, path string, conc int) float64 {
	for _, s := range rw.StateOps {
		if s.Path == path && s.Concurrency == conc {
			return s.FsyncsPerCreate
		}
	}
	return math.NaN()
}
