package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestSelfRouteRefusedByServeAndCheck: proxy A routes to proxy B; a
// connection of B routing to A closes a cycle. serve refuses it when it
// loads (instead of recursing: a listing would never end), and so does
// check --upstream-timeout run for B, naming the connection.
func TestSelfRouteRefusedByServeAndCheck(t *testing.T) {
	b := startServe(t, localHostpathMain, nil)
	a := startServe(t, localHostpathMain, map[string]string{"to-b": "driver: csi\ncsi:\n  endpoint: " + b.Endpoint + "\n"})
	// A's start-up capability refresh has loaded to-b and learned B's
	// marker. B's own view of a connection to A:
	conn := "driver: csi\ncsi:\n  endpoint: " + a.Endpoint + "\n"

	// check, for B.
	dir := t.TempDir()
	folder := filepath.Join(dir, "connections")
	if err := os.MkdirAll(folder, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(folder, "to-a.yaml"), []byte(conn), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "proxy.yaml")
	writeMainConfig(t, cfg, localHostpathMain, folder)
	var stdout, stderr bytes.Buffer
	code := run([]string{"check", "--config", cfg, "--csi-endpoint", b.Endpoint, "--upstream-timeout", "3s"}, &stdout, &stderr)
	want := filepath.Join(folder, "to-a.yaml") + ": error: csi.endpoint " + a.Endpoint + " is another proxy-topology"
	if code != 1 || !strings.Contains(stdout.String(), want) || !strings.Contains(stdout.String(), "route back to this proxy") {
		t.Errorf("check exit %d, want 1 and %q:\n%s%s", code, want, stdout.String(), stderr.String())
	}

	// serve, B.
	if err := os.WriteFile(filepath.Join(b.Folder, "to-a.yaml"), []byte(conn), 0o600); err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(b.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = csi.NewControllerClient(cc).ListSnapshots(ctx, &csi.ListSnapshotsRequest{SnapshotId: "s:to-a/x"})
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "route back to this proxy") {
		t.Errorf("B's call through to-a: %v, want FAILED_PRECONDITION naming the cycle", err)
	}
	// A listing through A ends: B skips its refused connection.
	if _, err := csi.NewControllerClient(cc).ListVolumes(ctx, &csi.ListVolumesRequest{}); err != nil {
		t.Errorf("ListVolumes through B: %v", err)
	}
}
