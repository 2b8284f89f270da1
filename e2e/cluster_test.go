package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

const (
	prefix  = "org.democratic-csi.topology"
	zoneKey = prefix + "/zone"
	// extraKey/extraValue are z2's `extra` node-affinity label. Nothing in
	// CSI puts it on a node; the admin labels the zone2 node with it.
	extraKey   = "storage.e2e.example.com/array"
	extraValue = "array-z2"
)

// connections are the connection files of every cluster, in name order.
var connections = []string{"all", "z1", "z2"}

// The node plugins: each gets its zone from a different rule source.
const (
	nodeA = "node-a-zone1" // nodeName rule
	nodeB = "node-b"       // env rule (ZONE=zone1)
	nodeC = "node-c"       // file rule (host file says zone2)
)

// cluster is one set of processes: three standalone local-hostpath
// upstreams (zone1 storage with staging, zone2 and everywhere storage
// without), a proxy controller
// and three proxy node plugins sharing one connection folder.
type cluster struct {
	dir     string
	connDir string
	// bases maps a connection to the local-hostpath base path whose
	// volumes/ directory holds its volumes.
	bases map[string]string
	// stages tells which connections' storage stages (forwarded
	// NodeStageVolume) rather than having it emulated by the proxy.
	stages map[string]bool
	// endpoints are the upstream sockets of the csi connections.
	endpoints map[string]string

	controller     csi.ControllerClient
	controllerProc *process
	nodes          []*nodePlugin
}

// nodePlugin is a proxy node plugin and the Kubernetes node it stands for.
type nodePlugin struct {
	name string
	proc *process
	csi  csi.NodeClient
	// adminLabels are Node labels beyond those kubelet derives from
	// NodeGetInfo.
	adminLabels map[string]string
}

func (c *cluster) node(t *testing.T, name string) *nodePlugin {
	t.Helper()
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	t.Fatalf("no node %s", name)
	return nil
}

// newTestDir returns a fresh, symlink-resolved directory short enough for
// unix socket paths (t.TempDir embeds the test name). Its cleanup refuses
// to delete across a mount: leftover mounts are detached first, and
// reported, since RemoveAll would otherwise delete through them.
func newTestDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pte2e-")
	if err != nil {
		t.Fatal(err)
	}
	if dir, err = filepath.EvalSymlinks(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, m := range mountsUnder(t, dir) {
			t.Errorf("mount %s left under the test directory; detaching it", m)
			forceUnmount(t, m)
		}
		if left := mountsUnder(t, dir); len(left) > 0 {
			t.Errorf("not removing %s: still mounted %v", dir, left)
			return
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove test directory: %v", err)
		}
	})
	return dir
}

// proxyConfig is the main config of the proxy processes. Nodes report only
// rule segments (type zone); the rules are tried in order and the first
// that yields the zone wins. hostDir stands for the node's host file
// system, so nodes differ only in node name, env and that file.
func proxyConfig(connDir, hostDir string) string {
	return fmt.Sprintf(`driver: proxy
proxy:
  configFolder: %s
  nodeTopology:
    type: zone
    prefix: %s
    fromRegexp:
    - topologyKey: zone
      source: nodeName
      regex: "node-[a-z]+-(?<zone>zone[0-9]+)"
      template: "{match:zone}"
    - topologyKey: zone
      source: env
      envName: ZONE
      regex: "zone[0-9]+"
      template: "{match:0}"
    - topologyKey: zone
      source: file
      file: %s
      regex: "(zone[0-9]+)"
      template: "{match:1}"
`, connDir, prefix, filepath.Join(hostDir, "zone"))
}

func upstreamConfig(base string, stage bool) string {
	return fmt.Sprintf("driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\n  stage: %t\n", base, stage)
}

// csiConnection is a `driver: csi` connection file offered in one zone,
// with optional extra labels.
func csiConnection(endpoint, zone string, extra map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "driver: csi\ncsi:\n  endpoint: %s\nproxy:\n  perDriver:\n    topology:\n    - requirements:\n        zone: %s\n", endpoint, zone)
	if len(extra) > 0 {
		b.WriteString("      extra:\n")
		for k, v := range extra {
			fmt.Fprintf(&b, "        %s: %s\n", k, v)
		}
	}
	return b.String()
}

// startCluster writes the configs and starts every process; cleanups stop
// them in reverse order (nodes, controller, upstreams).
func startCluster(t *testing.T) *cluster {
	t.Helper()
	dir := newTestDir(t)
	c := &cluster{
		dir:     dir,
		connDir: filepath.Join(dir, "connections"),
		bases: map[string]string{
			"z1":  filepath.Join(dir, "storage", "zone1"),
			"z2":  filepath.Join(dir, "storage", "zone2"),
			"all": filepath.Join(dir, "storage", "all"),
		},
		stages: map[string]bool{"z1": true},
	}
	cfg := func(name, content string) string { return c.writeConfig(t, name, content) }

	up1 := launch(t, dir, processSpec{name: "upstream-zone1", mode: "all", nodeID: "upstream-zone1",
		config: cfg("upstream-zone1", upstreamConfig(c.bases["z1"], true))})
	up2 := launch(t, dir, processSpec{name: "upstream-zone2", mode: "all", nodeID: "upstream-zone2",
		config: cfg("upstream-zone2", upstreamConfig(c.bases["z2"], false))})
	// "all" is storage every node reaches: a csi connection without
	// topology. (A built-in local-hostpath connection without topology
	// would be node-local, pinned to the controller's node: SPEC §12.)
	upAll := launch(t, dir, processSpec{name: "upstream-all", mode: "all", nodeID: "upstream-all",
		config: cfg("upstream-all", upstreamConfig(c.bases["all"], false))})

	c.endpoints = map[string]string{"z1": "unix://" + up1.sock, "z2": "unix://" + up2.sock, "all": "unix://" + upAll.sock}
	testkit.WriteFile(t, filepath.Join(c.connDir, "z1.yaml"), csiConnection(c.endpoints["z1"], "zone1", nil), 0o640)
	testkit.WriteFile(t, filepath.Join(c.connDir, "z2.yaml"), csiConnection(c.endpoints["z2"], "zone2", map[string]string{extraKey: extraValue}), 0o640)
	testkit.WriteFile(t, filepath.Join(c.connDir, "all.yaml"), fmt.Sprintf("driver: csi\ncsi:\n  endpoint: %s\n", c.endpoints["all"]), 0o640)

	// The controller's own host has no zone file; it evaluates no rules.
	ctrl := launch(t, dir, processSpec{name: "controller", mode: "controller", nodeID: "controller", logFormat: "json",
		config: cfg("controller", proxyConfig(c.connDir, filepath.Join(dir, "hosts", "controller")))})

	// Every node has the same rules; only node name, env and host file
	// differ. node-c's file ends in a newline, which the rule must trim.
	testkit.WriteFile(t, filepath.Join(dir, "hosts", nodeC, "zone"), "zone2\n", 0o640)
	specs := []struct {
		name  string
		env   []string
		admin map[string]string
	}{
		{name: nodeA},
		{name: nodeB, env: []string{"ZONE=zone1"}},
		{name: nodeC, admin: map[string]string{extraKey: extraValue}},
	}
	for _, s := range specs {
		p := launch(t, dir, processSpec{name: s.name, mode: "node", nodeID: s.name, env: s.env,
			config: cfg(s.name, proxyConfig(c.connDir, filepath.Join(dir, "hosts", s.name)))})
		c.nodes = append(c.nodes, &nodePlugin{name: s.name, proc: p, adminLabels: s.admin})
	}

	// All processes start concurrently; wait for each.
	for _, p := range []*process{up1, up2, upAll, ctrl} {
		p.waitReady(t)
	}
	for _, n := range c.nodes {
		n.proc.waitReady(t)
		n.csi = csi.NewNodeClient(n.proc.conn)
	}
	c.controllerProc = ctrl
	c.controller = csi.NewControllerClient(ctrl.conn)
	return c
}

// writeConfig writes a main config file for the process called name.
func (c *cluster) writeConfig(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(c.dir, "config", name+".yaml")
	testkit.WriteFile(t, p, content, 0o640)
	return p
}

// startNodePlugin starts one more proxy node plugin with the cluster's
// rules; hostDir/zone stands for the node's host file.
func (c *cluster) startNodePlugin(t *testing.T, name string, env ...string) *process {
	t.Helper()
	return startProcess(t, c.dir, processSpec{name: name, mode: "node", nodeID: name, env: env,
		config: c.writeConfig(t, name, proxyConfig(c.connDir, filepath.Join(c.dir, "hosts", name)))})
}

// k8sNodes asks every node plugin for NodeGetInfo, as kubelet does at
// registration, and returns the nodes as the provisioner sees them.
func (c *cluster) k8sNodes(t *testing.T) []k8sNode {
	t.Helper()
	var out []k8sNode
	for _, n := range c.nodes {
		info, err := n.csi.NodeGetInfo(callCtx(t), &csi.NodeGetInfoRequest{})
		if err != nil {
			t.Fatalf("NodeGetInfo on %s: %v", n.name, err)
		}
		out = append(out, nodeFromInfo(info, n.adminLabels))
	}
	return out
}

func mountCapability() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

// createRequest is the CreateVolume the provisioner sends for a claim of a
// StorageClass with parameters.connection = conn.
func createRequest(name, conn string, req *csi.TopologyRequirement) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{
		Name:                      name,
		CapacityRange:             &csi.CapacityRange{RequiredBytes: 1 << 20},
		VolumeCapabilities:        []*csi.VolumeCapability{mountCapability()},
		Parameters:                map[string]string{"connection": conn},
		AccessibilityRequirements: req,
	}
}

// deleteOnCleanup deletes a volume when the test ends unless the test did
// so itself (deleted reports that); a failing test then leaks nothing.
func (c *cluster) deleteOnCleanup(t *testing.T, volumeID string, deleted func() bool) {
	t.Cleanup(func() {
		if deleted() {
			return
		}
		// t.Context is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		if _, err := c.controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: volumeID}); err != nil {
			t.Errorf("cleanup: DeleteVolume %s: %v", volumeID, err)
		}
	})
}

// volumeDirs lists the volumes of a connection's storage (volumesIn).
func (c *cluster) volumeDirs(t *testing.T, conn string) []string {
	t.Helper()
	return volumesIn(t, c.bases[conn])
}

// zoneTopology is a topology with just the zone segment.
func zoneTopology(zone string) *csi.Topology {
	return &csi.Topology{Segments: map[string]string{zoneKey: zone}}
}

// Accessible topologies the connections offer, as CreateVolume must return
// them: prefixed requirements plus extra labels.
var (
	offeredZ1 = []*csi.Topology{zoneTopology("zone1")}
	offeredZ2 = []*csi.Topology{{Segments: map[string]string{zoneKey: "zone2", extraKey: extraValue}}}
)
