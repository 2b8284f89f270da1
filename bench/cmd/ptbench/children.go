package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof" // for -pprof-address
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"

	"github.com/democratic-csi/proxy-topology/bench/noop"
	"github.com/democratic-csi/proxy-topology/bench/rawproxy"
	"github.com/democratic-csi/proxy-topology/bench/typedproxy"
)

// The no-op upstream and the two forwarders run as child processes of the
// benchmark, like proxy-topology itself, so that each server on the path
// has a Go runtime of its own and none shares the load generator's.

func listenUnix(path string) (net.Listener, error) {
	_ = os.Remove(path)
	return net.Listen("unix", path)
}

// serveUntilSignal serves srv on lis until SIGTERM or SIGINT.
func serveUntilSignal(srv *grpc.Server, lis net.Listener) int {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sig; srv.Stop() }()
	if err := srv.Serve(lis); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// noopMain serves the no-op CSI driver: ptbench noop -listen PATH.
func noopMain(args []string) int {
	fs := flag.NewFlagSet("noop", flag.ExitOnError)
	listen := fs.String("listen", "", "unix socket path")
	_ = fs.Parse(args)
	lis, err := listenUnix(*listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := grpc.NewServer()
	(&noop.Driver{}).Register(srv)
	return serveUntilSignal(srv, lis)
}

// forwarderMain serves a forwarder built by newServer: ptbench raw|typed
// -listen PATH -upstream TARGET [-pprof-address ADDR].
func forwarderMain(name string, args []string, newServer func(upstream string) (*grpc.Server, *grpc.ClientConn, error)) int {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	listen := fs.String("listen", "", "unix socket path")
	up := fs.String("upstream", "", "gRPC target to forward to, e.g. unix:///path")
	pprofAddr := fs.String("pprof-address", "", "serve net/http/pprof here (for ptbench -profile)")
	_ = fs.Parse(args)
	if *pprofAddr != "" {
		go func() { _ = http.ListenAndServe(*pprofAddr, nil) }()
	}
	srv, cc, err := newServer(*up)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cc.Close()
	lis, err := listenUnix(*listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return serveUntilSignal(srv, lis)
}

// rawMain serves the raw forwarder (bench/rawproxy).
func rawMain(args []string) int {
	return forwarderMain("raw", args, func(up string) (*grpc.Server, *grpc.ClientConn, error) { return rawproxy.New(up) })
}

// typedMain serves the typed forwarder (bench/typedproxy).
func typedMain(args []string) int {
	return forwarderMain("typed", args, func(up string) (*grpc.Server, *grpc.ClientConn, error) { return typedproxy.New(up) })
}
