package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/democratic-csi/proxy-topology/internal/syncbuf"
	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

// TestCLI drives a running proxy with the binary's own client, as an admin
// would from inside the pod: create -> list -> delete, JSON parsed, and
// the exit codes scripts rely on.
func TestCLI(t *testing.T) {
	dir := newTestDir(t)
	connDir := filepath.Join(dir, "connections")
	testkit.WriteFile(t, filepath.Join(connDir, "zonal.yaml"), fmt.Sprintf(
		"driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\nproxy:\n  perDriver:\n    topology:\n    - requirements:\n        zone: zone1\n",
		filepath.Join(dir, "storage")), 0o640)
	cfg := filepath.Join(dir, "config", "proxy.yaml")
	testkit.WriteFile(t, cfg, proxyConfig(connDir, filepath.Join(dir, "hosts", "cli")), 0o640)
	p := startProcess(t, dir, processSpec{name: "cli", mode: "all", nodeID: "node-zone1-01", config: cfg})
	ep := "unix://" + p.sock

	run := func(wantCode int, args ...string) string {
		t.Helper()
		cmd := exec.Command(binary, append([]string{"csi", "--endpoint", ep, "-o", "json"}, args...)...)
		cmd.Env = baseEnv()
		out, err := cmd.Output()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if code != wantCode {
			t.Fatalf("csi %s: exit %d, want %d; output:\n%s", strings.Join(args, " "), code, wantCode, out)
		}
		return string(out)
	}

	var created struct {
		Volume struct {
			VolumeID           string `json:"volumeId"`
			CapacityBytes      string `json:"capacityBytes"`
			AccessibleTopology []struct {
				Segments map[string]string `json:"segments"`
			} `json:"accessibleTopology"`
		} `json:"volume"`
	}
	out := run(0, "create-volume", "--name", "cli-1", "--param", "connection=zonal", "--size", "1Gi", "--requisite", "zone=zone1")
	if err := json.Unmarshal([]byte(out), &created); err != nil {
		t.Fatalf("create-volume JSON: %v\n%s", err, out)
	}
	id := created.Volume.VolumeID
	if !strings.HasPrefix(id, "v:zonal/") || created.Volume.CapacityBytes != "1073741824" {
		t.Fatalf("created %+v", created.Volume)
	}
	if len(created.Volume.AccessibleTopology) != 1 || created.Volume.AccessibleTopology[0].Segments[zoneKey] != "zone1" {
		t.Fatalf("accessible topology %+v", created.Volume.AccessibleTopology)
	}

	// A zone the connection does not serve: RPC failure, exit 1.
	run(1, "create-volume", "--name", "cli-2", "--param", "connection=zonal", "--requisite", "zone=zone2")

	var listed struct {
		Entries []struct {
			Volume struct {
				VolumeID string `json:"volumeId"`
			} `json:"volume"`
		} `json:"entries"`
	}
	out = run(0, "list-volumes")
	if err := json.Unmarshal([]byte(out), &listed); err != nil {
		t.Fatalf("list-volumes JSON: %v\n%s", err, out)
	}
	if len(listed.Entries) != 1 || listed.Entries[0].Volume.VolumeID != id {
		t.Fatalf("list-volumes = %+v, want just %s", listed.Entries, id)
	}

	run(0, "delete-volume", "--volume", id)
	out = run(0, "list-volumes")
	if strings.Contains(out, id) {
		t.Fatalf("volume still listed after delete:\n%s", out)
	}
	run(2, "no-such-command")
}

// runBinary runs the binary with args and returns its exit code and output.
func runBinary(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = baseEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return code, out.String(), errb.String()
}

// TestCLIHelpAndExitCodes: what scripts and people see from the binary
// itself: help on stdout with exit 0, --version as version, and a wrong
// command line answered with exit 2 and the usage on stderr.
func TestCLIHelpAndExitCodes(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"serve", "--help"}, {"topology", "-h"}, {"check", "-h"},
		{"csi", "--help"}, {"csi", "create-volume", "-h"}, {"version", "--help"}} {
		code, out, errOut := runBinary(t, args...)
		if code != 0 || !strings.Contains(out, "Usage:") || errOut != "" {
			t.Errorf("%v: exit %d, stdout %d bytes, stderr %q", args, code, len(out), errOut)
		}
	}
	_, version, _ := runBinary(t, "version")
	if code, out, _ := runBinary(t, "--version"); code != 0 || out != version || version == "" {
		t.Errorf("--version: exit %d %q; version printed %q", code, out, version)
	}
	for _, args := range [][]string{{"no-such-command"}, {"--no-such-flag"}, {"check", "--no-such-flag"}, {"csi", "no-such-command"}} {
		code, out, errOut := runBinary(t, args...)
		if code != 2 || out != "" || !strings.Contains(errOut, "Usage:") {
			t.Errorf("%v: exit %d, want 2\nstdout:\n%s\nstderr:\n%s", args, code, out, errOut)
		}
	}
}

// TestCLIServesWithoutCommand starts the binary as the manifests in
// deploy/ may (flags, no "serve"), talks to it with the csi client, and
// stops it with SIGTERM: it exits 0 and removes its socket.
func TestCLIServesWithoutCommand(t *testing.T) {
	dir := newTestDir(t)
	connDir := filepath.Join(dir, "connections")
	testkit.WriteFile(t, filepath.Join(connDir, "local.yaml"), fmt.Sprintf(
		"driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\n", filepath.Join(dir, "storage")), 0o640)
	cfg := filepath.Join(dir, "config", "proxy.yaml")
	testkit.WriteFile(t, cfg, proxyConfig(connDir, filepath.Join(dir, "hosts", "default")), 0o640)
	sock := filepath.Join(dir, "sock", "csi.sock")
	ep := "unix://" + sock
	cmd := exec.Command(binary, "--config="+cfg, "--csi-endpoint="+ep, "--mode=all", "--node-id=node-cli-zone1", "--log-level=debug")
	cmd.Env = baseEnv()
	if raceEnabled && os.Getenv("GORACE") == "" {
		cmd.Env = append(cmd.Env, "GORACE=atexit_sleep_ms=100")
	}
	logs := &syncbuf.Buffer{} // written by the process while the test reads it
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	deadline := time.Now().Add(readyTimeout)
	for {
		code, out, _ := runBinary(t, "csi", "--endpoint", ep, "node-info")
		if code == 0 {
			if !strings.HasPrefix(out, "node_id:               node-cli-zone1\n") {
				t.Errorf("node-info:\n%s", out)
			}
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("exited before serving: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not serving within %s\n%s", readyTimeout, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30s after SIGTERM\n%s", logs.String())
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket %s left behind: %v", sock, err)
	}
}
