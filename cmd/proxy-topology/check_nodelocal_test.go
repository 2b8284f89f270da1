package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestCheckNodeLocal: check warns about a node-local connection unless the
// main config says the deployment is in node-local mode; a local-hostpath
// connection that declares topology (shared storage) is never warned about.
func TestCheckNodeLocal(t *testing.T) {
	const dir = "testdata/check/nodelocal"
	args := []string{"check", "--config", dir + "/proxy.yaml", "--connections-folder", dir + "/connections", "--csi-endpoint=unix:///run/csi/csi.sock"}
	for _, tc := range []struct{ nodeLocal, want string }{
		{"false", dir + `/proxy.yaml: ok
` + dir + `/connections/node-disk.yaml: warning: node-local: a local-hostpath connection without proxy.perDriver.topology keeps each volume on the disk of the node whose controller creates it, and pins the volume there by org.democratic-csi.topology/node; without the node-local deployment mode (proxy.nodeLocal: true, a controller and a --node-deployment provisioner on every node; docs/kubernetes.md) every volume lands on the one controller's node. If /var/lib/proxy-topology/node-disk is shared storage, declare where it is reachable in proxy.perDriver.topology
` + dir + `/connections/shared-nfs.yaml: ok
checked 3 files: 2 ok, 1 with warnings, 0 with errors
`},
		{"true", dir + `/proxy.yaml: ok
` + dir + `/connections/node-disk.yaml: ok
` + dir + `/connections/shared-nfs.yaml: ok
checked 3 files: 3 ok, 0 with warnings, 0 with errors
`},
	} {
		t.Run("nodeLocal="+tc.nodeLocal, func(t *testing.T) {
			t.Setenv("PROXY_TOPOLOGY_SET_PROXY__NODELOCAL", tc.nodeLocal)
			var stdout, stderr bytes.Buffer
			if code := run(args, &stdout, &stderr); code != 0 || stdout.String() != tc.want {
				t.Errorf("exit %d\n%s%s\nwant:\n%s", code, stdout.String(), stderr.String(), tc.want)
			}
		})
	}
}

// TestServeWarnsCentralNodeLocal: a controller-only process (the central
// Deployment) that finds node-local connections at start-up warns once,
// naming them and its node id, as check does; in the node-local mode
// (proxy.nodeLocal) or as a node plugin that also serves the controller
// (--mode=all) it does not, and neither does a controller whose
// local-hostpath connections all declare their topology.
func TestServeWarnsCentralNodeLocal(t *testing.T) {
	const warning = "node-local connections served by a central controller"
	disk := "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: " + t.TempDir() + "\n"
	shared := "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: " + t.TempDir() + "\nproxy:\n  perDriver:\n    topology:\n    - requirements: {zone: zone1}\n"
	for _, tc := range []struct {
		name, mode, nodeLocal string
		connections           map[string]string
		warn                  bool
	}{
		{name: "central controller", mode: "controller", nodeLocal: "false", connections: map[string]string{"disk": disk, "shared": shared}, warn: true},
		{name: "node-local mode", mode: "controller", nodeLocal: "true", connections: map[string]string{"disk": disk}},
		{name: "mode all", mode: "all", nodeLocal: "false", connections: map[string]string{"disk": disk}},
		{name: "shared storage only", mode: "controller", nodeLocal: "false", connections: map[string]string{"shared": shared}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("PROXY_TOPOLOGY_SET_PROXY__NODELOCAL", tc.nodeLocal)
			s := startServeWith(t, localHostpathMain, tc.connections, func(o *Options) { o.Mode = tc.mode })
			s.shutdown()
			var found []map[string]any
			for _, line := range strings.Split(strings.TrimSpace(s.Logs.String()), "\n") {
				var rec map[string]any
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatalf("log line %q: %v", line, err)
				}
				if msg, _ := rec["msg"].(string); strings.HasPrefix(msg, warning) {
					found = append(found, rec)
				}
			}
			if !tc.warn {
				if len(found) > 0 {
					t.Errorf("warned: %v", found)
				}
				return
			}
			if len(found) != 1 || found[0]["level"] != "WARN" || found[0]["connections"] != "disk" || found[0]["node_id"] != "node-1" {
				t.Errorf("want one WARN %q naming connections disk and node_id node-1, got %v\n%s", warning, found, s.Logs)
			}
		})
	}
}
