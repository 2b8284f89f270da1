// Package serve runs the benchmark's servers as processes of their own: a
// unix socket, a gRPC server on it until SIGTERM or SIGINT, and for the
// forwarders the flags ptbench starts them with.
//
// The typed and the raw forwarder are binaries of their own
// (bench/cmd/typedforwarder, bench/cmd/rawforwarder), not modes of ptbench:
// a server built into the load generator's binary runs the gRPC code at the
// same addresses as the load generator and the no-op upstream, and at
// concurrency 1, where the processes take turns on the same cores, it
// finds the CPU's branch predictors trained by them. No deployed proxy
// shares its code layout with its client or its upstream
// (docs/performance.md).
package serve

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
)

// Listen listens on the unix socket path, removing a stale socket first.
func Listen(path string) (net.Listener, error) {
	_ = os.Remove(path)
	return net.Listen("unix", path)
}

// UntilSignal serves srv on lis until SIGTERM or SIGINT and returns the
// process's exit code.
func UntilSignal(srv *grpc.Server, lis net.Listener) int {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sig; srv.Stop() }()
	if err := srv.Serve(lis); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// Forwarder is the main function of a forwarder built by newServer, with
// the flags -listen PATH -upstream TARGET [-pprof-address ADDR]; it
// returns the exit code.
func Forwarder(name string, args []string, newServer func(upstream string) (*grpc.Server, *grpc.ClientConn, error)) int {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	listen := fs.String("listen", "", "unix socket path")
	up := fs.String("upstream", "", "gRPC target to forward to, e.g. unix:///path")
	pprofAddr := fs.String("pprof-address", "", "serve net/http/pprof here (for ptbench -profile)")
	_ = fs.Parse(args)
	if *listen == "" || *up == "" {
		fmt.Fprintf(os.Stderr, "%s: -listen and -upstream are required\n", name)
		return 2
	}
	if *pprofAddr != "" {
		go func() { _ = http.ListenAndServe(*pprofAddr, nil) }()
	}
	srv, cc, err := newServer(*up)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cc.Close()
	lis, err := Listen(*listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return UntilSignal(srv, lis)
}
