package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	csi "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/democratic-csi/proxy-topology/bench/load"
)

// burstCounter counts failed pairs and keeps the first failure.
type burstCounter struct {
	errors atomic.Int64
	once   sync.Once
	first  string
}

func (c *burstCounter) fail(err error) {
	c.errors.Add(1)
	c.once.Do(func() { c.first = err.Error() })
}

// pair creates a volume named after the call on p and deletes it again.
// A failure is counted, not returned, so a burst always runs to the end
// and the count is the number of failed pairs; only the end of ctx (the
// end of a -profile load) stops it.
func (c *burstCounter) pair(p *proc, conn string) load.Call {
	client := csi.NewControllerClient(p.conn)
	return func(ctx context.Context, i int) error {
		name := fmt.Sprintf("burst-%s-%07d", p.name, i)
		resp, err := client.CreateVolume(ctx, createRequest(name, conn))
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			c.fail(fmt.Errorf("%s: CreateVolume %s: %w", p.name, name, err))
			return nil
		}
		id := resp.GetVolume().GetVolumeId()
		if _, err := client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil && ctx.Err() == nil {
			c.fail(fmt.Errorf("%s: DeleteVolume %s: %w", p.name, id, err))
		}
		return nil
	}
}

// burst measures CreateVolume+DeleteVolume pairs at the burst concurrency
// against the built-in local-hostpath driver served on its own (direct)
// and through proxy-topology (proxy), in interleaved rounds; the volumes
// are real directories with their records, on a fresh file system when
// ptbench can make one (burstFS). Afterwards neither driver may list a
// volume.
func (b *bench) burst(ctx context.Context, res *Results) error {
	var c burstCounter
	paths := []load.Path{
		{Name: "direct", Call: c.pair(b.hpDirect, hostpathConn), CPU: b.hpDirect.cpu},
		{Name: "proxy", Call: c.pair(b.hpProxy, hostpathConn), CPU: b.hpProxy.cpu},
	}
	fmt.Printf("burst CreateVolume+DeleteVolume c=%d: %d rounds x %d pairs x %d paths, volumes on %s ...\n", b.o.burstConc, b.o.burstRounds, b.o.burstPairs, len(paths), b.burstFS)
	res.BurstFS = b.burstFS
	samples, err := load.Rounds(ctx, paths, b.o.burstRounds, b.o.burstConc, b.o.burstPairs)
	if err != nil {
		return fmt.Errorf("burst: %w", err)
	}
	for _, p := range paths {
		res.Burst = append(res.Burst, PathResult{Method: "CreateVolume+DeleteVolume", Concurrency: b.o.burstConc, Path: p.Name, Stats: samples[p.Name].Summarize()})
	}
	res.BurstErrors, res.BurstFirstError = c.errors.Load(), c.first
	// Every pair that succeeded deleted its volume again.
	for _, p := range []*proc{b.hpDirect, b.hpProxy} {
		vols, err := csi.NewControllerClient(p.conn).ListVolumes(ctx, &csi.ListVolumesRequest{})
		if err != nil {
			return fmt.Errorf("%s: ListVolumes after the burst: %w", p.name, err)
		}
		res.BurstVolumesLeft += len(vols.GetEntries())
	}
	return nil
}
