package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// longNodeName is a real cloud node name of 93 bytes: a valid DNS name
// (each label under 64 bytes) and so a valid node name, but longer than
// the 63 bytes a label value may have.
var longNodeName = "ip-10-200-30-40." + strings.Repeat("x", 60) + ".compute.internal"

// TestLongNodeNameNodeLocal: on a node whose name is no label value, a
// node-local connection cannot pin its volumes (SPEC §12). serve says so
// at start-up naming the connection, does not report the node key in
// NodeGetInfo (kubelet would refuse it), and CreateVolume fails with
// FAILED_PRECONDITION saying why, never returning a PV affinity no node
// can carry; the dry run predicts the same answer. A connection that
// declares its topology is not affected.
func TestLongNodeNameNodeLocal(t *testing.T) {
	if len(longNodeName) != 93 {
		t.Fatalf("node name is %d bytes", len(longNodeName))
	}
	diskBase := filepath.Join(t.TempDir(), "disk")
	disk := "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: " + diskBase + "\n"
	shared := "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: " + filepath.Join(t.TempDir(), "shared") + "\nproxy:\n  perDriver:\n    topology:\n    - requirements: {zone: zone1}\n"
	s := startServeWith(t, "driver: proxy\nproxy:\n  nodeTopology:\n    type: cluster\n", map[string]string{"disk": disk, "shared": shared},
		func(o *Options) { o.NodeID = longNodeName })
	logs := s.Logs.String()
	for _, want := range []string{`"level":"ERROR"`, `"msg":"node-local connections cannot work on this node`, `"connections":"disk"`,
		`is not a valid label value (must be no more than 63 bytes)`} {
		if !strings.Contains(logs, want) {
			t.Errorf("start-up log lacks %s:\n%s", want, logs)
		}
	}

	code, out, errOut := runCSI(t, s.Endpoint, "node-info")
	if code != 0 || !strings.Contains(out, "org.democratic-csi.topology/cluster=local") || strings.Contains(out, "topology/node=") {
		t.Errorf("node-info: exit %d, want the cluster segment and no node key:\n%s%s", code, out, errOut)
	}

	want := `FAILED_PRECONDITION: connection "disk" is node-local (its volumes stay on the disk of the node that creates them): a volume is pinned to its node by org.democratic-csi.topology/node=<node name>, but node name "` + longNodeName + `" (93 bytes) is not a valid label value (must be no more than 63 bytes)`
	code, out, errOut = runCSI(t, s.Endpoint, "create-volume", "--name", "pvc-1", "--param", "connection=disk")
	if code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("create-volume on disk: exit %d, want 1 and %q\n%s%s", code, want, out, errOut)
	}
	if entries, _ := os.ReadDir(filepath.Join(diskBase, "volumes")); len(entries) > 0 {
		t.Errorf("a refused CreateVolume left %d volumes", len(entries))
	}
	if code, out, errOut = runCSI(t, s.Endpoint, "create-volume", "--name", "pvc-2", "--param", "connection=shared"); code != 0 || !strings.Contains(out, "zone=zone1") {
		t.Errorf("create-volume on shared: exit %d\n%s%s", code, out, errOut)
	}

	// The dry run on the same node predicts the server's answer.
	dir := t.TempDir()
	cfg := writeDryRunConfig(t, dir)
	if err := os.WriteFile(filepath.Join(dir, "connections", "disk.yaml"), []byte(disk), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runTopology(t, "--config", cfg, "--node-name", longNodeName, "--connection", "disk")
	if code != exitFailed || !strings.Contains(out, "CreateVolume: FailedPrecondition: "+strings.TrimPrefix(want, "FAILED_PRECONDITION: ")) {
		t.Errorf("dry run: exit %d, want 1 and the server's reason\n%s%s", code, out, errOut)
	}
}
