package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves /metrics, /healthz and /readyz.
//
// /healthz answers 200 whenever the process can run an HTTP handler: it is
// the liveness signal for a kubelet httpGet probe and deliberately checks
// nothing else, so a dead upstream never gets the proxy restarted. /readyz
// answers 200 when ready() is nil and 503 with its message otherwise.
func (m *Metrics) Handler(ready func() error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.gather(), promhttp.HandlerOpts{Registry: m.reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready:", err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// Server is the HTTP server on --metrics-address.
type Server struct {
	srv  *http.Server
	lis  net.Listener
	done chan struct{}
}

// Listen binds addr (host:port; port 0 picks a free one) and serves h on it
// until Shutdown. Binding happens here, so a taken port fails start-up.
func Listen(addr string, h http.Handler, log *slog.Logger) (*Server, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-address %q: %w", addr, err)
	}
	s := &Server{
		srv:  &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second},
		lis:  lis,
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "error", err)
		}
	}()
	return s, nil
}

// Addr is the bound address, e.g. 127.0.0.1:9808.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Shutdown stops the server, waiting for in-flight scrapes until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	<-s.done
	return err
}
