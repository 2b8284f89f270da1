package main

import (
	"flag"
	"fmt"
	"os"

	"google.golang.org/grpc"

	"github.com/democratic-csi/proxy-topology/bench/noop"
	"github.com/democratic-csi/proxy-topology/bench/serve"
)

// The no-op upstream runs as a child process of the benchmark, like every
// server on the paths, so that each has a Go runtime of its own and none
// shares the load generator's. It runs from the benchmark's own binary: it
// is every path's upstream, so what it shares with the load generator it
// shares on every path alike. The forwarders are binaries of their own
// (bench/serve says why).

// noopMain serves the no-op CSI driver: ptbench noop -listen PATH.
func noopMain(args []string) int {
	fs := flag.NewFlagSet("noop", flag.ExitOnError)
	listen := fs.String("listen", "", "unix socket path")
	_ = fs.Parse(args)
	lis, err := serve.Listen(*listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := grpc.NewServer()
	(&noop.Driver{}).Register(srv)
	return serve.UntilSignal(srv, lis)
}
