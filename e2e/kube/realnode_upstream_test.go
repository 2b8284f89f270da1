package kube

import (
	"path/filepath"
	"testing"
)

// upstream is the chart's upstreams.up1 entry (SPEC §14): a CSI driver
// deployed in the proxy's own pods. Its test driver is the proxy image
// serving the built-in local-hostpath standalone (main config driver:
// local-hostpath, no proxy in front of itself), from the image make
// node-images imports, with its config file rendered by the chart and
// its storage directory mounted. The proxy reaches it over the rendered
// socket (/csi/upstreams/up1/csi.sock); connection up1 says the storage
// is reachable on every node of the cluster.
func (r *realNodes) upstream() map[string]any {
	base := filepath.Join(r.storage, "up1")
	return map[string]any{
		"image":           nodeTools["PROXY_IMAGE"],
		"imagePullPolicy": "Never",
		"args": []any{"serve", "--config=/config/upstream.yaml", "--csi-endpoint=unix:///csi/csi.sock",
			"--node-id=$(NODE_NAME)", "--log-level=info"},
		"configFiles": map[string]any{"upstream.yaml": map[string]any{
			"driver": "local-hostpath", "local-hostpath": map[string]any{"shareBasePath": base, "stage": true},
		}},
		"extraVolumes":      []any{map[string]any{"name": "up1-storage", "hostPath": map[string]any{"path": base, "type": "Directory"}}},
		"extraVolumeMounts": []any{map[string]any{"name": "up1-storage", "mountPath": base}},
		"connection": map[string]any{"proxy": map[string]any{"perDriver": map[string]any{
			"topology": []any{map[string]any{"requirements": map[string]any{"cluster": "local"}}},
		}}},
	}
}

// TestRealNodeUpstream: an upstream deployed in the proxy's pods. A claim
// of class rn-upstream (connection up1) is created by the upstream's
// container in the controller pod; kubelet stages and publishes through
// the node pod's proxy, which forwards each call to the upstream's node
// container in the same pod over the rendered socket, and that container
// does the mount: the pod's file is in the upstream's storage. Deleting
// the pod unstages and unpublishes through both, deleting the claim
// deletes the volume.
func TestRealNodeUpstream(t *testing.T) {
	r := withRealNodes(t)
	n, calls := r.rnVolumeCycle(t, "upstream", "rn-upstream", "up1", "", "up1")
	for _, m := range []string{"NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume"} {
		if got := calls["upstream "+m+" up1"]; got != 1 {
			t.Errorf("%s: the node plugin made %d %s calls to upstream up1, want 1 (calls %v)", n.name, got, m, calls)
		}
	}
	t.Logf("%s: node plugin calls over the cycle %v", n.name, calls)
}
