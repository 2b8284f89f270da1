package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/democratic-csi/proxy-topology/bench/load"
)

// freeAddress returns a loopback address nothing listens on right now.
func freeAddress() (string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer lis.Close()
	return lis.Addr().String(), nil
}

func fetch(ctx context.Context, url, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// profile drives each method through the raw and typed forwarders and the
// one-connection proxy, one after the other, at concurrency 1 and the high
// concurrency, and the burst's CreateVolume+DeleteVolume pairs through
// local-hostpath served directly and through the proxy, taking a CPU
// profile of the serving process and its allocation profile before and
// after, into dir:
//
//	go tool pprof -top cpu-proxy-CreateVolume-c64.pprof
//	go tool pprof -sample_index=alloc_space -diff_base allocs-proxy-CreateVolume-c64-before.pprof -top allocs-proxy-CreateVolume-c64-after.pprof
func (b *bench) profile(ctx context.Context, dir string, seconds int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	time.Sleep(time.Until(b.written.Add(2500 * time.Millisecond)))
	targets := []struct {
		name, conn string
		p          *proc
	}{{"raw", "", b.raw}, {"typed", "", b.typed}, {"proxy", connName(0), b.p1}}
	for _, method := range b.o.methods {
		for _, conc := range []int{1, b.o.conc} {
			if b.o.skip["c"+fmt.Sprint(conc)] {
				continue
			}
			for _, t := range targets {
				call := volumeStats(t.p, t.conn)
				if method == "CreateVolume" {
					call = createVolume(t.p, 9, func(int) string { return connName(0) })
				}
				tag := fmt.Sprintf("%s-%s-c%d", t.name, method, conc)
				n, cpu, err := profileOne(ctx, "http://"+b.pprof[t.name]+"/debug/pprof/", dir, tag, seconds, conc, call, t.p)
				if err != nil {
					return err
				}
				fmt.Printf("%-36s %7d calls  %6.1f calls/s  %6.1f µs CPU/call\n", tag, n, float64(n)/float64(seconds), float64(cpu.Microseconds())/float64(n))
			}
		}
	}
	if b.hpDirect != nil {
		var c burstCounter
		for _, t := range []struct {
			p    *proc
			conn string
		}{{b.hpDirect, hostpathConn}, {b.hpProxy, hostpathConn}} {
			tag := fmt.Sprintf("%s-burst-c%d", t.p.name, b.o.burstConc)
			n, cpu, err := profileOne(ctx, "http://"+b.pprof[t.p.name]+"/debug/pprof/", dir, tag, seconds, b.o.burstConc, c.pair(t.p, t.conn), t.p)
			if err != nil {
				return err
			}
			fmt.Printf("%-36s %7d pairs  %6.1f pairs/s  %6.1f µs CPU/pair\n", tag, n, float64(n)/float64(seconds), float64(cpu.Microseconds())/float64(n))
		}
		if n := c.errors.Load(); n > 0 {
			return fmt.Errorf("%d CreateVolume+DeleteVolume pairs failed; the first: %s", n, c.first)
		}
	}
	fmt.Printf("profiles written to %s\n", dir)
	return nil
}

func profileOne(ctx context.Context, base, dir, tag string, seconds, conc int, call load.Call, p *proc) (int, time.Duration, error) {
	if err := fetch(ctx, base+"allocs", filepath.Join(dir, "allocs-"+tag+"-before.pprof")); err != nil {
		return 0, 0, err
	}
	pctx, cancel := context.WithTimeout(ctx, time.Duration(seconds)*time.Second)
	var wg sync.WaitGroup
	var calls int
	cpu0 := p.cpu()
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Load until the profile is taken; the error is the deadline.
		for pctx.Err() == nil {
			s, _ := load.Run(pctx, conc, 100*conc, call)
			for _, l := range s.Latencies {
				if l > 0 {
					calls++
				}
			}
		}
	}()
	err := fetch(ctx, fmt.Sprintf("%sprofile?seconds=%d", base, seconds), filepath.Join(dir, "cpu-"+tag+".pprof"))
	cancel()
	wg.Wait()
	cpu := p.cpu() - cpu0
	if err != nil {
		return 0, 0, err
	}
	return calls, cpu, fetch(ctx, base+"allocs", filepath.Join(dir, "allocs-"+tag+"-after.pprof"))
}
