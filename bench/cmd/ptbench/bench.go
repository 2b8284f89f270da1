package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/democratic-csi/proxy-topology/bench/load"
)

const (
	prefix = "org.democratic-csi.topology"
	zone   = "zone1"
	// handle is the upstream volume handle NodeGetVolumeStats asks about.
	handle = "pvc-2f0c6a7e-8d1b-4c55-9e0a-5b3c1d7f9a42"
)

// connName names connection i; every name has the same length, so no
// path pays for a longer one.
func connName(i int) string { return fmt.Sprintf("c%05d", i) }

// bench holds the processes of one run.
type bench struct {
	o                    options
	noop, raw, p1, pMany *proc
	// compare is a second one-connection proxy built from another tree
	// (-compare), measured as one more path.
	compare *proc
	// rawShared is the raw forwarder run from the benchmark's own binary
	// (-raw-shared), measured at concurrency 1 for comparison.
	rawShared *proc
	// written is when the last connection file was written.
	written time.Time
	// pprofAddress serves proxy-1's profiles and rawPprofAddress the raw
	// forwarder's, when o.profile is set.
	pprofAddress, rawPprofAddress string
}

func (b *bench) stop() {
	for _, p := range []*proc{b.compare, b.pMany, b.p1, b.rawShared, b.raw, b.noop} {
		p.stop()
	}
	b.noop, b.raw, b.rawShared, b.p1, b.pMany, b.compare = nil, nil, nil, nil, nil, nil
}

// startBench starts the no-op upstream, the raw forwarder, and two
// proxy-topology processes: one with a single connection file, one with
// o.connections of them.
func startBench(ctx context.Context, dir, bin string, o options) (b *bench, err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	b = &bench{o: o}
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
	// The floor runs from a copy of this binary: a file of its own, as
	// proxy-topology is, so the CPU caches do not already hold its code
	// because the load generator and the no-op upstream, which run the
	// same gRPC code from this very file, have just executed it. In the
	// same rounds, the forwarder run from this file was faster at
	// concurrency 1 in every run, by up to 6% (docs/performance.md); it is
	// still measured, as "raw-shared".
	rawBin := filepath.Join(dir, "ptbench-raw")
	if err = copyExecutable(self, rawBin); err != nil {
		return nil, err
	}
	var rawEnv []string
	if o.rawEnv != "" {
		rawEnv = strings.Split(o.rawEnv, ",")
	}
	rawArgs := func(bin, sock string) []string {
		return []string{bin, "raw", "-listen", sock, "-upstream", "unix://" + noopSock, "-workers", fmt.Sprint(o.rawWorkers)}
	}
	rawSock := filepath.Join(dir, "raw.sock")
	args := rawArgs(rawBin, rawSock)
	if o.profile != "" {
		if b.rawPprofAddress, err = freeAddress(); err != nil {
			return nil, err
		}
		args = append(args, "-pprof-address", b.rawPprofAddress)
	}
	if b.raw, err = start(ctx, dir, "raw", rawSock, rawEnv, args...); err != nil {
		return nil, err
	}
	if o.rawShared && o.profile == "" {
		sock := filepath.Join(dir, "raw-shared.sock")
		if b.rawShared, err = start(ctx, dir, "raw-shared", sock, rawEnv, rawArgs(self, sock)...); err != nil {
			return nil, err
		}
	}
	startProxy := func(name string, n int, extra ...string) (*proc, error) {
		bin := bin
		if name == "compare" {
			bin = o.compare
		}
		cfg, err := writeProxyConfig(filepath.Join(dir, name), "unix://"+noopSock, n)
		if err != nil {
			return nil, err
		}
		b.written = time.Now()
		sock := filepath.Join(dir, name+".sock")
		argv := append([]string{bin, "serve",
			"--config", cfg, "--csi-endpoint", "unix://" + sock, "--log-level", "warn", "--node-id", "bench-node"}, extra...)
		return start(ctx, dir, name, sock, []string{"ZONE=" + zone}, argv...)
	}
	var extra []string
	if o.profile != "" {
		if b.pprofAddress, err = freeAddress(); err != nil {
			return nil, err
		}
		extra = []string{"--pprof-address", b.pprofAddress}
	}
	if b.p1, err = startProxy("proxy-1", 1, extra...); err != nil {
		return nil, err
	}
	if o.profile != "" {
		return b, nil
	}
	if o.compare != "" {
		if b.compare, err = startProxy("compare", 1); err != nil {
			return nil, err
		}
	}
	fmt.Printf("writing %d connection files ...\n", o.connections)
	if b.pMany, err = startProxy(fmt.Sprintf("proxy-%d", o.connections), o.connections); err != nil {
		return nil, err
	}
	return b, nil
}

// copyExecutable copies the file src to dst, executable.
func copyExecutable(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o755)
}

// writeProxyConfig writes a main config and n connection files, all to the
// same upstream, each with a topology entry the benchmark's requests match.
func writeProxyConfig(dir, endpoint string, n int) (string, error) {
	folder := filepath.Join(dir, "connections")
	if err := os.MkdirAll(folder, 0o755); err != nil {
		return "", err
	}
	main := fmt.Sprintf(`driver: proxy
proxy:
  configFolder: %s
  nodeTopology:
    type: zone
    prefix: %s
    fromRegexp:
    - topologyKey: zone
      source: env
      envName: ZONE
      regex: "(zone[0-9]+)"
      template: "{match:1}"
`, folder, prefix)
	cfg := filepath.Join(dir, "proxy.yaml")
	if err := os.WriteFile(cfg, []byte(main), 0o644); err != nil {
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

// measure runs every measurement in order and fills res.
func (b *bench) measure(ctx context.Context, res *Results) error {
	var err error
	// Idle means started and never called.
	if res.Memory.IdleKiB, err = settledRSS(b.pMany.pid()); err != nil {
		return err
	}
	if res.Memory.IdleOneConnectionKiB, err = settledRSS(b.p1.pid()); err != nil {
		return err
	}
	// A connection file changed in the last 2 s is re-read on every call
	// (its timestamps cannot be trusted yet, see connection.FolderSource);
	// production files are older, and so are the measured ones.
	time.Sleep(time.Until(b.written.Add(2500 * time.Millisecond)))
	if err := b.check(ctx); err != nil {
		return err
	}

	// served is one measured path: its name, the connection its requests
	// name ("" for servers that know none) and the process serving it.
	type served struct {
		name, conn string
		p          *proc
	}
	paths := []served{{"direct", "", b.noop}, {"raw", "", b.raw}, {"proxy", connName(0), b.p1}}
	if b.rawShared != nil {
		paths = append(paths, served{"raw-shared", "", b.rawShared})
	}
	if b.compare != nil {
		paths = append(paths, served{"compare", connName(0), b.compare})
	}
	for _, method := range b.o.methods {
		for _, conc := range []int{1, b.o.conc} {
			if b.o.skip["c"+fmt.Sprint(conc)] {
				continue
			}
			rounds, n := b.o.rounds1, b.o.n1
			if conc > 1 {
				rounds, n = b.o.rounds64, b.o.n64
			}
			var lp []load.Path
			for i, p := range paths {
				if p.name == "raw-shared" && conc > 1 {
					continue // the difference is a concurrency-1 one
				}
				if method == "CreateVolume" {
					lp = append(lp, load.Path{Name: p.name, Call: createVolume(p.p, i, func(int) string { return connName(0) }), CPU: p.p.cpu})
				} else {
					lp = append(lp, load.Path{Name: p.name, Call: volumeStats(p.p, p.conn), CPU: p.p.cpu})
				}
			}
			fmt.Printf("%s c=%d: %d rounds x %d calls x %d paths ...\n", method, conc, rounds, n, len(lp))
			samples, err := load.Rounds(ctx, lp, rounds, conc, n)
			if err != nil {
				return fmt.Errorf("%s c=%d: %w", method, conc, err)
			}
			for _, p := range lp {
				res.Paths = append(res.Paths, PathResult{Method: method, Concurrency: conc, Path: p.Name, Stats: samples[p.Name].Summarize()})
			}
		}
	}

	// The peak includes the concurrency-64 rounds.
	if res.Memory.PeakKiB, err = statusKiB(b.p1.pid(), "VmHWM"); err != nil {
		return err
	}
	if res.Memory.RawPeakKiB, err = statusKiB(b.raw.pid(), "VmHWM"); err != nil {
		return err
	}

	if b.o.skip["probe"] {
		return nil
	}
	var probes []load.Path
	for _, p := range paths {
		if p.name != "raw-shared" {
			probes = append(probes, load.Path{Name: p.name, Call: probe(p.p), CPU: p.p.cpu})
		}
	}
	fmt.Printf("Probe c=1: %d rounds x %d calls x %d paths ...\n", b.o.rounds1, b.o.probeN, len(probes))
	samples, err := load.Rounds(ctx, probes, b.o.rounds1, 1, b.o.probeN)
	if err != nil {
		return fmt.Errorf("measuring Probe: %w", err)
	}
	for _, p := range probes {
		res.Paths = append(res.Paths, PathResult{Method: "Probe", Concurrency: 1, Path: p.Name, Stats: samples[p.Name].Summarize()})
	}

	if b.o.skip["scale"] {
		return nil
	}
	// Load every connection once (node calls: no volume is created), then
	// measure what the cache holds.
	fmt.Printf("loading %d connections ...\n", b.o.connections)
	start := time.Now()
	if _, err := load.Run(ctx, 4, b.o.connections, func(ctx context.Context, i int) error {
		_, err := csi.NewNodeClient(b.pMany.conn).NodeGetVolumeStats(ctx, statsRequest(connName(i)))
		return err
	}); err != nil {
		return fmt.Errorf("loading connections: %w", err)
	}
	res.Memory.LoadSeconds = time.Since(start).Seconds()
	res.Memory.Connections = b.o.connections
	if res.Memory.LoadedKiB, err = settledRSS(b.pMany.pid()); err != nil {
		return err
	}
	res.Memory.PerConnectionBytes = float64(res.Memory.LoadedKiB-res.Memory.IdleKiB) * 1024 / float64(b.o.connections)

	// Scale: the same CreateVolume against one connection and spread over
	// all of them, with the raw forwarder as the drift reference.
	many := b.o.connections
	scale := []load.Path{
		{Name: "raw", Call: createVolume(b.raw, 1, func(int) string { return connName(0) }), CPU: b.raw.cpu},
		{Name: "proxy-1", Call: createVolume(b.p1, 3, func(int) string { return connName(0) }), CPU: b.p1.cpu},
		{Name: fmt.Sprintf("proxy-%d", many), Call: createVolume(b.pMany, 4, func(i int) string { return connName(i % many) }), CPU: b.pMany.cpu},
	}
	fmt.Printf("scale CreateVolume c=1: %d rounds x %d calls x %d paths ...\n", b.o.rounds1, b.o.n1, len(scale))
	if samples, err = load.Rounds(ctx, scale, b.o.rounds1, 1, b.o.n1); err != nil {
		return fmt.Errorf("scale: %w", err)
	}
	for _, p := range scale {
		res.Scale = append(res.Scale, PathResult{Method: "CreateVolume", Concurrency: 1, Path: p.Name, Stats: samples[p.Name].Summarize()})
	}
	return nil
}

// check makes one call of each kind on every path and verifies the answers,
// so a misconfigured run fails instead of measuring errors.
func (b *bench) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, p := range []*proc{b.noop, b.raw, b.rawShared} {
		if p == nil {
			continue
		}
		resp, err := csi.NewControllerClient(p.conn).CreateVolume(ctx, createRequest("check", connName(0)))
		if err != nil || resp.GetVolume().GetVolumeId() != "check" {
			return fmt.Errorf("%s: CreateVolume = %v, %v", p.name, resp, err)
		}
	}
	for _, p := range []*proc{b.p1, b.pMany, b.compare} {
		if p == nil {
			continue
		}
		resp, err := csi.NewControllerClient(p.conn).CreateVolume(ctx, createRequest("check", connName(0)))
		if err != nil {
			return fmt.Errorf("%s: CreateVolume: %w", p.name, err)
		}
		v := resp.GetVolume()
		if v.GetVolumeId() != "v:"+connName(0)+"/check" || len(v.GetAccessibleTopology()) != 1 ||
			v.GetAccessibleTopology()[0].GetSegments()[prefix+"/zone"] != zone {
			return fmt.Errorf("%s: CreateVolume returned %v", p.name, v)
		}
	}
	if _, err := csi.NewNodeClient(b.p1.conn).NodeGetVolumeStats(ctx, statsRequest(connName(0))); err != nil {
		return fmt.Errorf("%s: NodeGetVolumeStats: %w", b.p1.name, err)
	}
	return nil
}

var (
	mountCap = []*csi.VolumeCapability{{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}}
	// requirement is what the external-provisioner sends for a
	// WaitForFirstConsumer claim in strict mode: the selected node's
	// topology as both requisite and preferred.
	requirement = &csi.TopologyRequirement{
		Requisite: []*csi.Topology{{Segments: map[string]string{prefix + "/zone": zone}}},
		Preferred: []*csi.Topology{{Segments: map[string]string{prefix + "/zone": zone}}},
	}
)

// createRequest is a CreateVolume as the external-provisioner sends it
// (with --extra-create-metadata).
func createRequest(name, conn string) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{
		Name:               name,
		CapacityRange:      &csi.CapacityRange{RequiredBytes: 1 << 30},
		VolumeCapabilities: mountCap,
		Parameters: map[string]string{
			"connection":                       conn,
			"csi.storage.k8s.io/pvc/name":      "data-postgres-0",
			"csi.storage.k8s.io/pvc/namespace": "default",
			"csi.storage.k8s.io/pv/name":       name,
			"csi.storage.k8s.io/fstype":        "ext4",
		},
		AccessibilityRequirements: requirement,
	}
}

// createVolume calls CreateVolume on p with a distinct name per call; tag
// keeps names distinct between paths.
func createVolume(p *proc, tag int, conn func(i int) string) load.Call {
	c := csi.NewControllerClient(p.conn)
	return func(ctx context.Context, i int) error {
		_, err := c.CreateVolume(ctx, createRequest(fmt.Sprintf("pvc-%08x-7c1e-4b5a-9d2f-%012x", tag, i), conn(i)))
		return err
	}
}

// statsRequest asks about the benchmark volume: through the proxy as
// v:<conn>/<handle>, directly as the bare handle.
func statsRequest(conn string) *csi.NodeGetVolumeStatsRequest {
	id := handle
	if conn != "" {
		id = "v:" + conn + "/" + handle
	}
	return &csi.NodeGetVolumeStatsRequest{
		VolumeId:   id,
		VolumePath: "/var/lib/kubelet/pods/0d5e2a7c-1f3b-4e8a-b6c9-7a2d4f1e3b5c/volumes/kubernetes.io~csi/" + handle + "/mount",
	}
}

func volumeStats(p *proc, conn string) load.Call {
	c := csi.NewNodeClient(p.conn)
	req := statsRequest(conn)
	return func(ctx context.Context, _ int) error {
		_, err := c.NodeGetVolumeStats(ctx, req)
		return err
	}
}

func probe(p *proc) load.Call {
	c := csi.NewIdentityClient(p.conn)
	return func(ctx context.Context, _ int) error {
		resp, err := c.Probe(ctx, &csi.ProbeRequest{})
		if err == nil && !resp.GetReady().GetValue() {
			err = fmt.Errorf("%s is not ready", p.name)
		}
		return err
	}
}
