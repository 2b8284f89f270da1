package main

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"strings"

	"github.com/spf13/pflag"
)

// addPprofFlag registers --pprof-address, hidden from the help: it is for
// developers (the benchmark in bench/ profiles the proxy with it), not for
// deployments.
func addPprofFlag(fs *pflag.FlagSet) *string {
	addr := fs.String("pprof-address", "", "host:port serving net/http/pprof under /debug/pprof/; empty: off")
	if err := fs.MarkHidden("pprof-address"); err != nil {
		panic(err) // the flag was just defined
	}
	return addr
}

// startPprof serves the profiling endpoints on their own listener (never
// on the metrics port, which may be reachable from the cluster). Without
// them the heap profile has no reader, so its sampling is turned off: the
// runtime's sample table (about 1.4 MiB) would otherwise fill as the
// connection files are parsed, in every idle process (docs/performance.md;
// GODEBUG=memprofilerate=N still decides when it is set).
func startPprof(addr string, log *slog.Logger) error {
	if addr == "" {
		if !strings.Contains(os.Getenv("GODEBUG"), "memprofilerate=") {
			runtime.MemProfileRate = 0
		}
		return nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	log.Warn("serving pprof; do not expose this address", "address", "http://"+lis.Addr().String()+"/debug/pprof/")
	go func() { _ = http.Serve(lis, mux) }()
	return nil
}
