package main

import (
	"flag"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
)

// hiddenFlags are registered but left out of serve -h: they are for
// developers (the benchmark in bench/ profiles the proxy with them), not
// for deployments.
var hiddenFlags = map[string]bool{"pprof-address": true}

// addPprofFlag registers --pprof-address and hides the hidden flags from
// the usage text.
func addPprofFlag(fs *flag.FlagSet) *string {
	addr := fs.String("pprof-address", "", "host:port serving net/http/pprof under /debug/pprof/; empty: off")
	fs.Usage = func() {
		shown := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
		shown.SetOutput(fs.Output())
		fs.VisitAll(func(f *flag.Flag) {
			if !hiddenFlags[f.Name] {
				shown.Var(f.Value, f.Name, f.Usage)
			}
		})
		shown.Usage()
	}
	return addr
}

// startPprof serves the profiling endpoints on their own listener (never
// on the metrics port, which may be reachable from the cluster).
func startPprof(addr string, log *slog.Logger) error {
	if addr == "" {
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
