package main

import (
	"context"
	"fmt"
	"maps"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/democratic-csi/proxy-topology/bench/load"
)

// served is one measured path: its name, the connection its requests name
// ("" for servers that know none) and the process serving it.
type served struct {
	name, conn string
	p          *proc
}

// measure runs every measurement in order and fills res.
func (b *bench) measure(ctx context.Context, res *Results) error {
	m := &res.Memory
	took, err := b.quiet(ctx, 0, time.Minute)
	if err != nil {
		return err
	}
	fmt.Printf("servers quiet %.1f s after start-up\n", took.Seconds())
	// Idle means started and never called.
	if m.NodeIdleKiB, err = settledRSS(b.node.pid()); err != nil {
		return err
	}
	if m.IdleOneConnectionKiB, err = settledRSS(b.p1.pid()); err != nil {
		return err
	}
	m.NodeRules = b.o.nodeRules
	// A connection file changed in the last 2 s is re-read on every call
	// (its timestamps cannot be trusted yet, see connection.FolderSource);
	// production files are older, and so are the measured ones.
	time.Sleep(time.Until(b.written.Add(2500 * time.Millisecond)))
	if err := b.check(ctx); err != nil {
		return err
	}

	paths := []served{{"direct", "", b.noop}, {"raw", "", b.raw}, {"typed", "", b.typed}, {"proxy", connName(0), b.p1}}
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

	// The peaks include the concurrency-64 rounds.
	for _, pk := range []struct {
		p   *proc
		kib *int64
	}{{b.p1, &m.PeakKiB}, {b.typed, &m.TypedPeakKiB}, {b.raw, &m.RawPeakKiB}} {
		if *pk.kib, err = statusKiB(pk.p.pid(), "VmHWM"); err != nil {
			return err
		}
	}

	if !b.o.skip["probe"] {
		var probes []load.Path
		for _, p := range paths {
			probes = append(probes, load.Path{Name: p.name, Call: probe(p.p), CPU: p.p.cpu})
		}
		fmt.Printf("Probe c=1: %d rounds x %d calls x %d paths ...\n", b.o.rounds1, b.o.probeN, len(probes))
		samples, err := load.Rounds(ctx, probes, b.o.rounds1, 1, b.o.probeN)
		if err != nil {
			return fmt.Errorf("measuring Probe: %w", err)
		}
		for _, p := range probes {
			res.Paths = append(res.Paths, PathResult{Method: "Probe", Concurrency: 1, Path: p.Name, Stats: samples[p.Name].Summarize()})
		}
	}

	if !b.o.skip["burst"] {
		if err := b.burst(ctx, res); err != nil {
			return err
		}
	}

	if err := b.controller(ctx, res); err != nil {
		return err
	}
	if !b.o.skip["scale"] {
		return b.scale(ctx, res)
	}
	return nil
}

// controller starts the controller with its connection files, measures it
// idle (started, quiet, never called) and checks it answers.
func (b *bench) controller(ctx context.Context, res *Results) error {
	if err := b.startMany(); err != nil {
		return err
	}
	took, err := b.quiet(ctx, 0, time.Minute)
	if err != nil {
		return err
	}
	fmt.Printf("%s quiet %.1f s after start-up\n", b.pMany.name, took.Seconds())
	if res.Memory.ControllerIdleKiB, err = settledRSS(b.pMany.pid()); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return b.checkCreate(ctx, b.pMany)
}

// scale loads every connection of the controller once, measures what the
// cache holds, then CreateVolume against one connection (proxy-1) and
// spread over all of them (the controller), with the typed forwarder as
// the drift reference.
func (b *bench) scale(ctx context.Context, res *Results) error {
	m := &res.Memory
	many := b.o.connections
	fmt.Printf("loading %d connections ...\n", many)
	start := time.Now()
	c := csi.NewControllerClient(b.pMany.conn)
	if _, err := load.Run(ctx, 4, many, func(ctx context.Context, i int) error {
		_, err := c.CreateVolume(ctx, createRequest(fmt.Sprintf("load-%d", i), connName(i)))
		return err
	}); err != nil {
		return fmt.Errorf("loading connections: %w", err)
	}
	m.LoadSeconds = time.Since(start).Seconds()
	m.Connections = many
	var err error
	if m.LoadedKiB, err = settledRSS(b.pMany.pid()); err != nil {
		return err
	}
	m.PerConnectionBytes = float64(m.LoadedKiB-m.ControllerIdleKiB) * 1024 / float64(many)
	// The loads asked for a capability refresh, which reads every file
	// again up to 5 s after the last one (and the files must be 2.5 s old,
	// see measure).
	if _, err := b.quiet(ctx, 6*time.Second, time.Minute); err != nil {
		return err
	}

	scale := []load.Path{
		{Name: "typed", Call: createVolume(b.typed, 1, func(int) string { return connName(0) }), CPU: b.typed.cpu},
		{Name: "proxy-1", Call: createVolume(b.p1, 3, func(int) string { return connName(0) }), CPU: b.p1.cpu},
		{Name: fmt.Sprintf("proxy-%d", many), Call: createVolume(b.pMany, 4, func(i int) string { return connName(i % many) }), CPU: b.pMany.cpu},
	}
	fmt.Printf("scale CreateVolume c=1: %d rounds x %d calls x %d paths ...\n", b.o.rounds1, b.o.n1, len(scale))
	samples, err := load.Rounds(ctx, scale, b.o.rounds1, 1, b.o.n1)
	if err != nil {
		return fmt.Errorf("scale: %w", err)
	}
	for _, p := range scale {
		res.Scale = append(res.Scale, PathResult{Method: "CreateVolume", Concurrency: 1, Path: p.Name, Stats: samples[p.Name].Summarize()})
	}
	return nil
}

// checkCreate checks a proxy-topology process's answer to CreateVolume.
func (b *bench) checkCreate(ctx context.Context, p *proc) error {
	resp, err := csi.NewControllerClient(p.conn).CreateVolume(ctx, createRequest("check", connName(0)))
	if err != nil {
		return fmt.Errorf("%s: CreateVolume: %w", p.name, err)
	}
	v := resp.GetVolume()
	if v.GetVolumeId() != "v:"+connName(0)+"/check" || len(v.GetAccessibleTopology()) != 1 ||
		v.GetAccessibleTopology()[0].GetSegments()[prefix+"/zone"] != zone {
		return fmt.Errorf("%s: CreateVolume returned %v", p.name, v)
	}
	return nil
}

// check makes one call of each kind on every path and verifies the answers,
// so a misconfigured run fails instead of measuring errors.
func (b *bench) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, p := range []*proc{b.noop, b.raw, b.typed} {
		resp, err := csi.NewControllerClient(p.conn).CreateVolume(ctx, createRequest("check", connName(0)))
		if err != nil || resp.GetVolume().GetVolumeId() != "check" {
			return fmt.Errorf("%s: CreateVolume = %v, %v", p.name, resp, err)
		}
		stats, err := csi.NewNodeClient(p.conn).NodeGetVolumeStats(ctx, statsRequest(""))
		if err != nil || len(stats.GetUsage()) != 1 {
			return fmt.Errorf("%s: NodeGetVolumeStats = %v, %v", p.name, stats, err)
		}
	}
	for _, p := range []*proc{b.p1, b.compare} {
		if p == nil {
			continue
		}
		if err := b.checkCreate(ctx, p); err != nil {
			return err
		}
		stats, err := csi.NewNodeClient(p.conn).NodeGetVolumeStats(ctx, statsRequest(connName(0)))
		if err != nil || len(stats.GetUsage()) != 1 {
			return fmt.Errorf("%s: NodeGetVolumeStats = %v, %v", p.name, stats, err)
		}
	}
	// The node plugin evaluated its rules as written: one segment per key.
	info, err := csi.NewNodeClient(b.node.conn).NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil {
		return fmt.Errorf("%s: NodeGetInfo: %w", b.node.name, err)
	}
	if got := info.GetAccessibleTopology().GetSegments(); !maps.Equal(got, b.nodeSegments) {
		return fmt.Errorf("%s: NodeGetInfo reports %d segments %v, want %d: %v", b.node.name, len(got), got, len(b.nodeSegments), b.nodeSegments)
	}
	return nil
}
