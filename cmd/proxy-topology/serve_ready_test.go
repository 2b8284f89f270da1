package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
)

// TestProbeWaitsForCapabilities: Serve's Probe reports not ready while a
// connection's upstream is not listening yet, and ready as soon as a retry
// confirms it (well before the start-up grace), or, when it never comes,
// once the start-up grace is over, with a warning; never earlier.
func TestProbeWaitsForCapabilities(t *testing.T) {
	for _, tc := range []struct {
		name     string
		grace    time.Duration
		upAfter  time.Duration // 0: the upstream never listens
		minReady time.Duration
		maxReady time.Duration
		warning  bool
	}{
		{"upstream starts late", 20 * time.Second, 500 * time.Millisecond, 500 * time.Millisecond, 10 * time.Second, false},
		{"upstream never starts", 2 * time.Second, 0, 2 * time.Second, 12 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := startupGrace
			startupGrace = tc.grace
			t.Cleanup(func() { startupGrace = old })

			dir := t.TempDir()
			folder := filepath.Join(dir, "connections")
			if err := os.MkdirAll(folder, 0o750); err != nil {
				t.Fatal(err)
			}
			upSock := filepath.Join(testkit.SocketDir(t), "up.sock")
			if err := os.WriteFile(filepath.Join(folder, "late.yaml"), []byte("driver: csi\ncsi:\n  endpoint: unix://"+upSock+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg := filepath.Join(dir, "proxy.yaml")
			writeMainConfig(t, cfg, localHostpathMain, folder)
			sock := filepath.Join(testkit.SocketDir(t), "csi.sock")
			logs := &syncBuffer{}
			log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			listening := make(chan struct{}, 1)
			o := Options{Config: cfg, Endpoint: "unix://" + sock, NodeID: "node-1", Mode: "all", ShutdownTimeout: 5 * time.Second,
				listening: func(string) { listening <- struct{}{} }}
			ctx, cancel := context.WithCancel(context.Background())
			stopped := make(chan error, 1)
			start := time.Now()
			go func() { stopped <- Serve(ctx, o, log) }()
			t.Cleanup(func() { cancel(); <-stopped })

			if tc.upAfter > 0 {
				time.AfterFunc(tc.upAfter, func() { serveBuiltIn(t, upSock) })
			}
			cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			id := csi.NewIdentityClient(cc)
			probe := func() (bool, error) {
				pctx, pcancel := context.WithTimeout(context.Background(), time.Second)
				defer pcancel()
				resp, err := id.Probe(pctx, &csi.ProbeRequest{}, grpc.WaitForReady(true))
				return resp.GetReady().GetValue(), err
			}
			// The socket serves before Probe is ready.
			var ready bool
			for deadline := time.Now().Add(10 * time.Second); ; {
				if ready, err = probe(); err == nil || time.Now().After(deadline) {
					break
				}
			}
			if err != nil {
				t.Fatalf("Probe: %v\n%s", err, logs)
			}
			if ready && time.Since(start) < tc.minReady {
				t.Fatalf("Probe ready after %s, before the upstream was asked (want not before %s)", time.Since(start), tc.minReady)
			}
			for !ready {
				if time.Since(start) > tc.maxReady {
					t.Fatalf("Probe not ready after %s\n%s", tc.maxReady, logs)
				}
				time.Sleep(50 * time.Millisecond)
				if ready, err = probe(); err != nil {
					t.Fatal(err)
				}
			}
			if took := time.Since(start); took < tc.minReady {
				t.Errorf("Probe ready after %s, want at least %s", took, tc.minReady)
			}
			select {
			case <-listening:
			case <-time.After(5 * time.Second):
				t.Fatal("Serve did not report listening after Probe was ready")
			}
			if got := strings.Contains(logs.String(), "start-up grace over"); got != tc.warning {
				t.Errorf("grace warning logged = %t, want %t\n%s", got, tc.warning, logs)
			}
		})
	}
}

// serveBuiltIn serves the built-in driver on a unix socket at path as an
// external upstream, until the test ends. It may run on any goroutine.
func serveBuiltIn(t *testing.T, path string) {
	d, err := hostpath.New(hostpath.Options{DriverName: "up.example.com", Version: "v1", NodeID: "node-1", BasePath: t.TempDir(),
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Error(err)
		return
	}
	t.Cleanup(func() { _ = d.Close() })
	testkit.ServeUnix(t, path, d.Register)
}
