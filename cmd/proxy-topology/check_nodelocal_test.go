package main

import (
	"bytes"
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
