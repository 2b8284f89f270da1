package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// The switch from democratic-csi's proxy (issue 39): the old deployment in
// a namespace of its own, the chart's release that replaces it in another,
// one node, one CSI driver name for both.
const (
	migDriver    = "migrate.e2e.democratic-csi.proxy"
	migNode      = "mig-node"
	migOldNS     = "e2e-migrate-old"
	migNS        = "e2e-migrate"
	migRelease   = "mig"
	migClass     = "mig-local"
	migSnapClass = "mig-snapshots"
)

var volumeSnapshotContents = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents"}

// migValues are the democratic-csi Helm values of the old deployment, as
// its proxy docs write them (docs/proxy-driver.md, docs/proxy-topology.md):
// the driver name and the CSIDriver fields, the external-provisioner's
// topology flags, a first-consumer class for the local-hostpath
// connection, and driver.config the proxy config with type node (its docs:
// local drivers need it) reading the connections from folder.
func migValues(folder string) map[string]any {
	return map[string]any{
		"csiDriver": map[string]any{"name": migDriver, "attachRequired": false, "podInfoOnMount": false,
			"storageCapacity": false, "fsGroupPolicy": "File"},
		"controller": map[string]any{
			"extraVolumes":        []any{map[string]any{"name": "connections", "secret": map[string]any{"secretName": "connections"}}},
			"driver":              map[string]any{"extraVolumeMounts": []any{map[string]any{"name": "connections", "mountPath": "/mnt/connections"}}},
			"externalProvisioner": map[string]any{"extraArgs": []any{"--feature-gates=Topology=true", "--strict-topology=true", "--immediate-topology=false"}},
		},
		"storageClasses": []any{map[string]any{"name": migClass, "reclaimPolicy": "Delete", "volumeBindingMode": "WaitForFirstConsumer",
			"allowVolumeExpansion": false, "parameters": map[string]any{"connection": "local"}}},
		"volumeSnapshotClasses": []any{map[string]any{"name": migSnapClass, "deletionPolicy": "Delete"}},
		"driver": map[string]any{"config": map[string]any{
			"driver": "proxy",
			"proxy": map[string]any{"configFolder": folder, "cacheTimeoutMinutes": 60,
				"nodeTopology": map[string]any{"type": "node", "prefix": prefix}},
		}},
	}
}

// migConnection is the user's local-hostpath connection: democratic-csi's
// own driver config (examples/local-hostpath.yaml's keys), node-local.
func migConnection(data string) string {
	return fmt.Sprintf(`driver: local-hostpath
instance_id:
local-hostpath:
  shareBasePath: %s
  controllerBasePath: %s
  dirPermissionsMode: "0777"
  dirPermissionsUser: root
  dirPermissionsGroup: root
`, data, data)
}

// TestMigrateFromDemocraticProxy (issue 39) runs the switch for real.
// Before: democratic-csi's proxy driver (DEMOCRATIC_CSI_PROXY, commit
// bb0e3c3, run with node) serves connection local (its local-hostpath) as
// its chart deploys it: a controller and a node plugin, the real
// csi-provisioner and csi-snapshotter beside the controller, the real
// snapshot-controller (with --enable-distributed-snapshotting, which the
// node-local mode after the switch needs), the CSIDriver and the classes
// of its values. Its two claims bind, a file is written in each through
// its node plugin, a snapshot of the first is taken. `proxy-topology
// migrate --check` says the existing handles are served after the switch.
// Then the old deployment is stopped and the chart's release is installed
// with the values `proxy-topology migrate` wrote from the old values and
// connections folder; its node pod runs as processes (the upstream
// container as democratic-csi's local-hostpath from DEMOCRATIC_CSI, else
// from the proxy's tree; proxy-topology; the node-local csi-provisioner and
// csi-snapshotter). The node reports the same topology; the old claims'
// PVs keep their handles and are staged, published and read back (the
// files written through the old proxy); a claim restored from the old
// snapshot has the snapshotted file; a new claim works; then snapshot,
// claims and volumes are deleted through the new release, and their
// directories are gone. Expansion: the driver advertises none (checked),
// and the node-local mode runs no resizer.
func TestMigrateFromDemocraticProxy(t *testing.T) {
	need(t)
	proxyTree, why := democraticProxyTree(t)
	if proxyTree == "" {
		t.Skip(why)
	}
	c := withControlPlane(t)
	upstreamTree := proxyTree
	if d := os.Getenv(democraticEnv); d != "" {
		upstreamTree = d
	}
	t.Logf("old release: democratic-csi's proxy from %s; new release's upstream: democratic-csi's local-hostpath from %s", proxyTree, upstreamTree)
	ctx := context.Background()
	base, err := os.MkdirTemp("", "ptmig-") // short: unix socket paths
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	data, conns := filepath.Join(base, "data"), filepath.Join(base, "connections")
	for _, d := range []string{data, conns} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(conns, "local.yaml"), []byte(migConnection(data)), 0o600); err != nil {
		t.Fatal(err)
	}
	values := migValues(conns)
	valuesPath := writeYAML(t, filepath.Join(base, "democratic-csi-values.yaml"), values)
	proxyCfg := writeYAML(t, filepath.Join(base, "driver-config-file.yaml"), values["driver"].(map[string]any)["config"])

	snapshotCRDs(t, c)
	ensureModesNamespace(t, c)
	kc := oldDeploymentKubeconfig(t, c)
	startProcess(t, "snapshot-controller", tools["SNAPSHOT_CONTROLLER"],
		[]string{"--kubeconfig=" + kc, "--leader-election=false", "--enable-distributed-snapshotting"}, envList(nil))
	createOldObjects(t, c)

	// The old deployment.
	labels := map[string]string{"kubernetes.io/hostname": migNode}
	if _, err := c.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: migNode, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.client.StorageV1().CSINodes().Delete(context.Background(), migNode, metav1.DeleteOptions{})
		_ = c.client.CoreV1().Nodes().Delete(context.Background(), migNode, metav1.DeleteOptions{})
	})
	oldCtrl := startDemocraticProxy(t, proxyTree, proxyCfg, filepath.Join(base, "old-controller"), "controller")
	oldNode := startDemocraticProxy(t, proxyTree, proxyCfg, filepath.Join(base, "old-node"), "node")
	oldInfo := nodeInfo(t, oldNode)
	if err := registerDriver(c.client, migDriver, migNode, oldInfo); err != nil {
		t.Fatal(err)
	}
	if err := schedulable(ctx, c, migNode, labels); err != nil {
		t.Fatal(err)
	}
	addr := "--csi-address=" + strings.TrimPrefix(oldCtrl.endpoint, "unix://")
	oldProv := startContainer(t, "old csi-provisioner", tools["CSI_PROVISIONER"], []string{addr, "--kubeconfig=" + kc,
		"--leader-election=false", "--strict-topology=true", "--immediate-topology=false", "--extra-create-metadata", "--timeout=90s"}, envList(nil))
	oldSnap := startContainer(t, "old csi-snapshotter", tools["CSI_SNAPSHOTTER"], []string{addr, "--kubeconfig=" + kc,
		"--leader-election=false", "--timeout=90s"}, envList(nil))

	old := &stack{c: c, provisioner: oldProv}
	var oldPVs []*corev1.PersistentVolume
	for _, name := range []string{"mig-old-a", "mig-old-b"} {
		createClaim(t, c, name, migClass)
		createPod(t, c, name+"-app", name, labels)
		pvc, _ := old.waitBoundAndScheduled(t, name, name+"-app")
		pv, err := c.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != migDriver || !strings.HasPrefix(pv.Spec.CSI.VolumeHandle, "v:local/") {
			t.Fatalf("PV %s is not a volume of democratic-csi's proxy connection local: %+v", pv.Name, pv.Spec.CSI)
		}
		terms, _ := affinityTerms(pv)
		t.Logf("old release: claim %s bound to %s, handle %s, node affinity %v", name, pv.Name, pv.Spec.CSI.VolumeHandle, terms)
		publishAndWrite(t, oldNode, pv, data, filepath.Join(base, "old"))
		oldPVs = append(oldPVs, pv)
	}
	snapHandle := takeSnapshot(t, c, "mig-snap", "mig-old-a", []*process{oldSnap})
	t.Logf("old release: snapshot mig-snap of mig-old-a, handle %s", snapHandle)
	if !strings.HasPrefix(snapHandle, "s:local/") {
		t.Fatalf("snapshot handle %q is not democratic-csi's proxy's s:local/…", snapHandle)
	}

	// Before the switch: what serves each handle prefix afterwards.
	pvList, contentList := kubectlGetJSON(t, c, base)
	for _, list := range []string{pvList, contentList} {
		out, notes, code := runMigrate(t, "--values", valuesPath, "--connections", conns, "--check", list)
		if code != 0 {
			t.Fatalf("migrate --check %s: exit %d\n%s%s", filepath.Base(list), code, out, notes)
		}
		t.Logf("migrate --check %s:\n%s", filepath.Base(list), out)
	}
	migrated, notes, code := runMigrate(t, "--values", valuesPath, "--connections", conns)
	if code != 0 {
		t.Fatalf("migrate: exit %d\n%s", code, notes)
	}
	t.Logf("migrate's notes:\n%s", notes)
	migratedPath := filepath.Join(base, "proxy-topology-values.yaml")
	if err := os.WriteFile(migratedPath, []byte(migrated), 0o600); err != nil {
		t.Fatal(err)
	}
	oldServed := countDemocraticCalls(oldCtrl.logs.String() + oldNode.logs.String())

	// The switch: the old deployment goes, the chart's release comes.
	for _, p := range []*process{oldProv, oldSnap} {
		p.stop()
	}
	for _, p := range []*plugin{oldCtrl, oldNode} {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		<-p.exited
	}
	// Kubelet's part when the old node plugin's registration socket
	// goes: the driver leaves CSINode (its node id, n=<node> in
	// democratic-csi's proxy, cannot change in place).
	deregisterDriver(t, c, migDriver, migNode)
	installValuesFile(t, c, migRelease, migNS, migratedPath)
	ds, err := c.client.AppsV1().DaemonSets(migNS).Get(ctx, migRelease+"-proxy-topology-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := daemonSetPod(t, c, ds, ds.Spec.Template, migNode)
	startUpstreamContainer(t, pod, "local", upstreamTree)
	proxy := startNodeContainer(t, pod)
	ran := append([]string{"upstream-local", "proxy-topology", "csi-provisioner", "csi-snapshotter"}, runNodeSidecars(t, pod, migDriver)...)
	newInfo := nodeInfo(t, proxy)
	if d := cmp.Diff(oldInfo.GetAccessibleTopology().GetSegments(), newInfo.GetAccessibleTopology().GetSegments()); d != "" {
		t.Errorf("the node's topology changed with the switch (-old +new):\n%s", d)
	}
	if err := registerDriver(c.client, migDriver, migNode, newInfo); err != nil {
		t.Fatal(err)
	}
	prov, _ := sidecar(t, pod, "csi-provisioner", "CSI_PROVISIONER")
	snapper, _ := sidecar(t, pod, "csi-snapshotter", "CSI_SNAPSHOTTER")
	logContainers(t, pod, ran)
	cur := &stack{c: c, provisioner: prov}

	// The old claims: same PVs, same handles, their files read back.
	for _, old := range oldPVs {
		pv, err := c.client.CoreV1().PersistentVolumes().Get(ctx, old.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("PV %s after the switch: %v", old.Name, err)
		}
		if pv.Spec.CSI.VolumeHandle != old.Spec.CSI.VolumeHandle || pv.Status.Phase != corev1.VolumeBound {
			t.Errorf("PV %s after the switch: handle %s (was %s), phase %s", pv.Name, pv.Spec.CSI.VolumeHandle, old.Spec.CSI.VolumeHandle, pv.Status.Phase)
		}
		publishAndRead(t, proxy, pv, filepath.Join(base, "new"), map[string]string{"written-through-" + old.Name: old.Name})
	}
	// Expansion, where the driver can: democratic-csi's local-hostpath
	// cannot (its EXPAND_VOLUME is commented out), and the node-local
	// mode runs no csi-resizer.
	caps, err := csi.NewControllerClient(proxy.conn).ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cp := range caps.GetCapabilities() {
		if cp.GetRpc().GetType() == csi.ControllerServiceCapability_RPC_EXPAND_VOLUME {
			t.Errorf("the new release advertises EXPAND_VOLUME for democratic-csi's local-hostpath: expand the old claims here")
		}
	}
	if _, err := c.client.AppsV1().Deployments(migNS).Get(ctx, migRelease+"-proxy-topology-controller", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a controller Deployment (with a resizer) exists in node-local mode: %v", err)
	}
	t.Log("expansion: not done: democratic-csi's local-hostpath advertises no EXPAND_VOLUME (nor does the proxy for it), and the node-local mode has no csi-resizer")

	// Restored from the old snapshot, by the new release.
	createClaimFrom(t, c, "mig-restore", migClass, "mig-snap")
	createPod(t, c, "mig-restore-app", "mig-restore", labels)
	pvc, _ := cur.waitBoundAndScheduled(t, "mig-restore", "mig-restore-app")
	restored, err := c.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("new release: mig-restore from snapshot %s: %s", snapHandle, restored.Spec.CSI.VolumeHandle)
	publishAndRead(t, proxy, restored, filepath.Join(base, "new"), map[string]string{"written-through-" + oldPVs[0].Name: oldPVs[0].Name})

	// A new claim.
	createClaim(t, c, "mig-new", migClass)
	createPod(t, c, "mig-new-app", "mig-new", labels)
	pvc, _ = cur.waitBoundAndScheduled(t, "mig-new", "mig-new-app")
	fresh, err := c.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(fresh.Spec.CSI.VolumeHandle, "v:local/") {
		t.Errorf("new claim's handle %s", fresh.Spec.CSI.VolumeHandle)
	}
	publishAndWrite(t, proxy, fresh, data, filepath.Join(base, "new"))
	// The new release's node-local volumes are pinned to their node with
	// the key the old proxy used, as the old ones are.
	want, _ := affinityTerms(oldPVs[0])
	for _, pv := range []*corev1.PersistentVolume{restored, fresh} {
		got, err := affinityTerms(pv)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("PV %s (%s) of the new release: node affinity differs from the old release's volumes' (-old +new):\n%s", pv.Name, pv.Spec.CSI.VolumeHandle, d)
		}
	}

	// Everything goes through the new release: the old snapshot first
	// (while its source claim exists), then claims and volumes.
	deleteSnapshot(t, c, "mig-snap", []*process{snapper})
	for _, name := range []string{"mig-old-a", "mig-old-b", "mig-restore", "mig-new"} {
		deletePod(t, c, name+"-app")
		if err := c.client.CoreV1().PersistentVolumeClaims(modesNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, pv := range append(slices.Clone(oldPVs), restored, fresh) {
		cur.waitPVGone(t, pv.Name)
		dir := filepath.Join(data, "v", strings.TrimPrefix(pv.Spec.CSI.VolumeHandle, "v:local/"))
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("volume %s: its directory %s is still there after DeleteVolume: %v", pv.Spec.CSI.VolumeHandle, dir, err)
		}
	}
	newServed := countProxyCalls(proxy.logs.String())
	t.Logf("served by the old release (democratic-csi's proxy): %s", summary(oldServed))
	// The external-provisioner may call DeleteVolume again for a volume
	// it deleted (idempotent, OK): the count can exceed the volumes.
	t.Logf("served by the new release (proxy-topology, connection local): %s", summary(newServed))
	for _, m := range []string{"NodeStageVolume", "NodePublishVolume", "CreateVolume", "DeleteVolume", "DeleteSnapshot"} {
		if newServed[m] == 0 {
			t.Errorf("the new release served no %s: %v", m, newServed)
		}
	}
}

func writeYAML(t *testing.T, path string, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
