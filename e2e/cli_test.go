package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLI drives a running proxy with the binary's own client, as an admin
// would from inside the pod: create -> list -> delete, JSON parsed, and
// the exit codes scripts rely on.
func TestCLI(t *testing.T) {
	dir := newTestDir(t)
	connDir := filepath.Join(dir, "connections")
	writeFile(t, filepath.Join(connDir, "zonal.yaml"), fmt.Sprintf(
		"driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\nproxy:\n  perDriver:\n    topology:\n    - requirements:\n        zone: zone1\n",
		filepath.Join(dir, "storage")))
	cfg := filepath.Join(dir, "config", "proxy.yaml")
	writeFile(t, cfg, proxyConfig(connDir, filepath.Join(dir, "hosts", "cli")))
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

	run(0, "delete-volume", id)
	out = run(0, "list-volumes")
	if strings.Contains(out, id) {
		t.Fatalf("volume still listed after delete:\n%s", out)
	}
	run(2, "no-such-command")
}
