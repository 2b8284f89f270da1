package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

const (
	prefix = "org.democratic-csi.topology"
	zone   = "zone1"
	// handle is the upstream volume handle NodeGetVolumeStats asks about.
	handle = "pvc-2f0c6a7e-8d1b-4c55-9e0a-5b3c1d7f9a42"
	// hostpathConn names the local-hostpath connection of proxy-hostpath.
	hostpathConn = "hp"
	// nodeName is the node plugin's --node-id, which its nodeName rules
	// read.
	nodeName = "worker-zone3-rack12-node07"
)

// connName names connection i; every name has the same length, so no
// path pays for a longer one.
func connName(i int) string { return fmt.Sprintf("c%05d", i) }

// bench holds the processes of one run.
type bench struct {
	o options
	// noop is the upstream; raw and typed the two forwarders in front of
	// it; p1 proxy-topology (mode all) with one connection file to it.
	noop, raw, typed, p1 *proc
	// compare is a second one-connection proxy built from another tree
	// (-compare), measured as one more path.
	compare *proc
	// pMany is the controller (mode controller) with o.connections
	// connection files; node the node plugin (mode node) with o.nodeRules
	// node-topology rules.
	pMany, node *proc
	// startMany starts pMany. It runs only for the measurements that use
	// it, after the paths, Probe and the burst: reading its 10,000 files
	// for the capability refresh (at start, a few seconds after a new
	// connection loads, and every minute) takes seconds of CPU, which
	// would otherwise fall on whichever path is being measured.
	startMany func() error
	// hpDirect serves the built-in local-hostpath driver on its own
	// (main config driver: local-hostpath); hpProxy is proxy-topology with
	// one local-hostpath connection. Each has its own base path.
	hpDirect, hpProxy *proc
	// burstFS says where hpDirect and hpProxy keep their volumes
	// (burstFS()); releaseFS unmounts it once they have stopped.
	burstFS   string
	releaseFS func()
	// nodeSegments is what the node plugin's NodeGetInfo must report.
	nodeSegments map[string]string
	// written is when the last connection file was written.
	written time.Time
	// pprof maps a path (raw, typed, proxy, hostpath-direct,
	// hostpath-proxy) to the address serving its process's profiles, when
	// o.profile is set.
	pprof map[string]string
}

// procs are the processes started, the last started first.
func (b *bench) procs() []*proc {
	var started []*proc
	for _, p := range []*proc{b.hpProxy, b.hpDirect, b.node, b.pMany, b.compare, b.p1, b.typed, b.raw, b.noop} {
		if p != nil {
			started = append(started, p)
		}
	}
	return started
}

func (b *bench) stop() {
	for _, p := range b.procs() {
		p.stop()
	}
	b.noop, b.raw, b.typed, b.p1, b.compare, b.pMany, b.node, b.hpDirect, b.hpProxy = nil, nil, nil, nil, nil, nil, nil, nil, nil
	if b.releaseFS != nil {
		b.releaseFS()
		b.releaseFS = nil
	}
}

// startBench starts the no-op upstream, the raw and typed forwarders and
// the proxy-topology processes. With o.profile set it starts only the
// upstream, the forwarders, proxy-1 and the two local-hostpath servers,
// each serving its profiles.
func startBench(ctx context.Context, dir, bin string, o options) (b *bench, err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	bins := [][2]string{{"ptbench (load generator, no-op upstream)", self},
		{"typed forwarder", forwarderBin(dir, "typed")}, {"raw forwarder", forwarderBin(dir, "raw")}, {"proxy-topology", bin}}
	var also [][2]string
	if o.compare != "" {
		also = append(also, [2]string{"compare", o.compare})
	}
	line, err := checkLayouts(bins, also)
	if err != nil {
		return nil, err
	}
	fmt.Println(line)
	b = &bench{o: o, pprof: map[string]string{}}
	started := b // b is nil once an error is returned
	defer func() {
		if err != nil {
			started.stop()
		}
	}()
	noopSock := filepath.Join(dir, "noop.sock")
	if b.noop, err = start(ctx, dir, "noop", noopSock, nil, self, "noop", "-listen", noopSock); err != nil {
		return nil, err
	}
	// pprofArgs asks the process serving path for its profiles.
	pprofArgs := func(path, flag string) ([]string, error) {
		if o.profile == "" {
			return nil, nil
		}
		addr, err := freeAddress()
		b.pprof[path] = addr
		return []string{flag, addr}, err
	}
	// Each forwarder is a binary of its own, built by setup, with a code
	// layout of its own (bench/serve; checkLayouts verifies it).
	forwarder := func(kind string) (*proc, error) {
		bin := forwarderBin(dir, kind)
		sock := filepath.Join(dir, kind+".sock")
		extra, err := pprofArgs(kind, "-pprof-address")
		if err != nil {
			return nil, err
		}
		argv := append([]string{bin, "-listen", sock, "-upstream", "unix://" + noopSock}, extra...)
		return start(ctx, dir, kind, sock, nil, argv...)
	}
	if b.raw, err = forwarder("raw"); err != nil {
		return nil, err
	}
	if b.typed, err = forwarder("typed"); err != nil {
		return nil, err
	}

	// serve starts proxy-topology (the binary bin) as process name with the
	// main config cfg.
	serve := func(name, bin, cfg, mode string, env []string, extra ...string) (*proc, error) {
		sock := filepath.Join(dir, name+".sock")
		argv := append([]string{bin, "serve", "--config", cfg, "--csi-endpoint", "unix://" + sock,
			"--mode", mode, "--log-level", "warn", "--node-id", "bench-node"}, extra...)
		return start(ctx, dir, name, sock, env, argv...)
	}
	proxy := func(name, bin, mode string, n int, extra ...string) (*proc, error) {
		cfg, err := writeProxyConfig(filepath.Join(dir, name), "unix://"+noopSock, n)
		if err != nil {
			return nil, err
		}
		b.written = time.Now()
		return serve(name, bin, cfg, mode, []string{"ZONE=" + zone}, extra...)
	}
	extra, err := pprofArgs("proxy", "--pprof-address")
	if err != nil {
		return nil, err
	}
	if b.p1, err = proxy("proxy-1", bin, "all", 1, extra...); err != nil {
		return nil, err
	}
	// hostpath starts the two local-hostpath servers of the burst.
	hostpath := func() error {
		var base string
		base, b.burstFS, b.releaseFS = burstFS(dir)
		cfg, err := writeHostpathDirect(filepath.Join(base, "hostpath-direct"))
		if err != nil {
			return err
		}
		extra, err := pprofArgs("hostpath-direct", "--pprof-address")
		if err != nil {
			return err
		}
		if b.hpDirect, err = serve("hostpath-direct", bin, cfg, "all", nil, extra...); err != nil {
			return err
		}
		if cfg, err = writeHostpathProxy(filepath.Join(base, "hostpath-proxy")); err != nil {
			return err
		}
		b.written = time.Now()
		if extra, err = pprofArgs("hostpath-proxy", "--pprof-address"); err != nil {
			return err
		}
		b.hpProxy, err = serve("hostpath-proxy", bin, cfg, "all", nil, extra...)
		return err
	}
	if o.profile != "" {
		if !o.skip["burst"] {
			err = hostpath()
		}
		return b, err
	}
	if o.compare != "" {
		if b.compare, err = proxy("compare", o.compare, "all", 1); err != nil {
			return nil, err
		}
	}
	b.startMany = func() (err error) {
		fmt.Printf("writing %d connection files ...\n", o.connections)
		b.pMany, err = proxy(fmt.Sprintf("proxy-%d", o.connections), bin, "controller", o.connections)
		return err
	}

	nodeDir := filepath.Join(dir, "node")
	cfg, env, segments, err := writeNodeConfig(nodeDir, "unix://"+noopSock, o.nodeRules)
	if err != nil {
		return nil, err
	}
	b.nodeSegments = segments
	if b.node, err = serve("node", bin, cfg, "node", env, "--node-id", nodeName); err != nil {
		return nil, err
	}
	if err = hostpath(); err != nil {
		return nil, err
	}
	return b, nil
}

// quiet waits until no server uses more than 1% of a CPU over half a
// second ending at least `least` after it was called, and returns how long
// that took. Servers answer Probe as soon as they serve, and some keep
// working in the background: proxy-10000 reads all its connection files
// to find the capabilities to advertise (proxy.capabilities: auto) once
// it starts, and again at most 5 s after a connection is first loaded.
func (b *bench) quiet(ctx context.Context, least, timeout time.Duration) (time.Duration, error) {
	const window, most = 500 * time.Millisecond, 5 * time.Millisecond
	procs := b.procs()
	cpu := func() []time.Duration {
		used := make([]time.Duration, len(procs))
		for i, p := range procs {
			used[i] = p.cpu()
		}
		return used
	}
	start := time.Now()
	prev := cpu()
	for {
		select {
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		case <-time.After(window):
		}
		cur := cpu()
		var busy []string
		for i, p := range procs {
			if used := cur[i] - prev[i]; used > most {
				busy = append(busy, fmt.Sprintf("%s (%s)", p.name, used.Round(time.Millisecond)))
			}
		}
		if len(busy) == 0 && time.Since(start) >= least {
			return time.Since(start), nil
		}
		if time.Since(start) > timeout {
			return time.Since(start), fmt.Errorf("servers still busy %s after start-up: %s in the last %s",
				timeout, strings.Join(busy, ", "), window)
		}
		prev = cur
	}
}

func writeFile(path, data string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(data), 0o644)
}

// mainConfig is a main config of driver proxy serving the connections in
// folder, with node topology type zone and the given fromRegexp rules
// (YAML list items, or "" for the benchmark's one env rule).
func mainConfig(folder, rules string) string {
	if rules == "" {
		rules = `    - topologyKey: zone
      source: env
      envName: ZONE
      regex: "(zone[0-9]+)"
      template: "{match:1}"
`
	}
	return fmt.Sprintf(`driver: proxy
proxy:
  configFolder: %s
  nodeTopology:
    type: zone
    prefix: %s
    fromRegexp:
%s`, folder, prefix, rules)
}

// writeProxyConfig writes a main config and n connection files, all to the
// same upstream, each with a topology entry the benchmark's requests match.
func writeProxyConfig(dir, endpoint string, n int) (string, error) {
	folder := filepath.Join(dir, "connections")
	if err := os.MkdirAll(folder, 0o755); err != nil {
		return "", err
	}
	cfg := filepath.Join(dir, "proxy.yaml")
	if err := writeFile(cfg, mainConfig(folder, "")); err != nil {
		return "", err
	}
	for i := 0; i < n; i++ {
		conn := fmt.Sprintf(`driver: csi
csi:
  endpoint: %s
  parameters:
    fsType: ext4
proxy:
  perDriver:
    topology:
    - requirements:
        region: region1
        zone: %s
      extra:
        storage.example.com/pool: pool-%d
    - requirements:
        region: region1
        zone: zone2
`, endpoint, zone, i%7)
		if err := os.WriteFile(filepath.Join(folder, connName(i)+".yaml"), []byte(conn), 0o644); err != nil {
			return "", err
		}
	}
	return cfg, nil
}

// writeNodeConfig writes the node plugin's main config: one connection file
// to endpoint and n fromRegexp rules over n/2 keys, a primary and a
// fallback per key, reading the node name, env vars and files (the
// fallbacks also the hostname); nodeLabel rules would need an API server.
// Every primary matches, so the node reports one segment per key, which it
// returns with the env the process needs.
func writeNodeConfig(dir, endpoint string, n int) (cfg string, env []string, segments map[string]string, err error) {
	folder := filepath.Join(dir, "connections")
	if err := writeFile(filepath.Join(folder, connName(0)+".yaml"), fmt.Sprintf("driver: csi\ncsi:\n  endpoint: %s\n", endpoint)); err != nil {
		return "", nil, nil, err
	}
	segments = map[string]string{}
	var rules strings.Builder
	for k := 0; k < n/2; k++ {
		key := fmt.Sprintf("key%02d", k)
		for alt := 0; alt < 2; alt++ {
			source := []string{"nodeName", "env", "file"}[k%3]
			if alt == 1 {
				source = []string{"hostname", "env", "file", "nodeName"}[k%4]
			}
			value := fmt.Sprintf("worker-zone%d-rack%d-node%02d", k%4, k, alt)
			fmt.Fprintf(&rules, "    - topologyKey: %s\n      source: %s\n", key, source)
			switch source {
			case "env":
				name := fmt.Sprintf("TOPO_%d_%d", k, alt)
				env = append(env, name+"="+value)
				fmt.Fprintf(&rules, "      envName: %s\n", name)
			case "file":
				file := filepath.Join(dir, "topology", fmt.Sprintf("%d-%d", k, alt))
				if err := writeFile(file, value+"\n"); err != nil {
					return "", nil, nil, err
				}
				fmt.Fprintf(&rules, "      file: %s\n", file)
			case "nodeName":
				value = nodeName
			}
			if alt == 0 {
				// regexp2 numbers the unnamed groups before the named
				// ones: the rack is group 1.
				fmt.Fprintf(&rules, "      regex: 'worker-(?<zone>zone\\d+)-rack(\\d+)-.*'\n      template: '{match:zone}-r{match:1}'\n")
				segments[prefix+"/"+key] = zoneRack(value)
			} else {
				fmt.Fprintf(&rules, "      regex: '([a-z]+)-(zone\\d+).*'\n      template: '{match:2}'\n")
			}
		}
	}
	cfg = filepath.Join(dir, "proxy.yaml")
	return cfg, env, segments, writeFile(cfg, mainConfig(folder, rules.String()))
}

// zoneRack renders what the primary rules make of worker-zoneZ-rackR-…:
// zoneZ-rR.
func zoneRack(value string) string {
	f := strings.Split(value, "-")
	return f[1] + "-r" + strings.TrimPrefix(f[2], "rack")
}

// writeHostpathDirect writes a main config serving the built-in
// local-hostpath driver on its own, with its volumes under dir/data.
func writeHostpathDirect(dir string) (string, error) {
	cfg := filepath.Join(dir, "main.yaml")
	return cfg, writeFile(cfg, fmt.Sprintf("driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\n", filepath.Join(dir, "data")))
}

// writeHostpathProxy writes a main config of driver proxy with one
// local-hostpath connection, hostpathConn, with its volumes under dir/data.
// The connection declares where it is reachable (zone1, as the burst's
// requests ask): a base path on shared storage. Without topology it would
// be node-local (SPEC §12), pinned to this controller's node, and a
// request for zone1 would be refused as RESOURCE_EXHAUSTED; the burst
// measures the proxy's cost, not that rule.
func writeHostpathProxy(dir string) (string, error) {
	folder := filepath.Join(dir, "connections")
	conn := fmt.Sprintf("driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\nproxy:\n  perDriver:\n    topology:\n    - requirements: {zone: %s}\n",
		filepath.Join(dir, "data"), zone)
	if err := writeFile(filepath.Join(folder, hostpathConn+".yaml"), conn); err != nil {
		return "", err
	}
	cfg := filepath.Join(dir, "proxy.yaml")
	return cfg, writeFile(cfg, mainConfig(folder, ""))
}
