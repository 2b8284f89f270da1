package kube

// Helpers of TestMigrateFromDemocraticProxy (migrate_test.go): the old
// deployment's cluster objects and processes, snapshots, what kubectl get
// -o json prints, reading volumes back, and counting the calls each
// release served.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// snapshotCRDs installs external-snapshotter's CRDs for the test.
func snapshotCRDs(t *testing.T, c *cluster) {
	t.Helper()
	client := snapshotModule(t, "github.com/kubernetes-csi/external-snapshotter/client/v8")
	crds, err := filepath.Glob(filepath.Join(client, "config", "crd", "*.storage.k8s.io_*.yaml"))
	if err != nil || len(crds) == 0 {
		t.Fatalf("no CRDs in %s: %v", client, err)
	}
	t.Cleanup(func() { c.deleteCRDs(t, crds) })
	c.applyFiles(t, crds...)
	// A test that failed half-way leaves snapshots whose finalizers no
	// controller removes any more; they would keep the CRDs.
	t.Cleanup(func() {
		ctx := context.Background()
		for _, res := range []schema.GroupVersionResource{volumeSnapshots, volumeSnapshotContents} {
			list, err := c.dyn.Resource(res).Namespace("").List(ctx, metav1.ListOptions{})
			if err != nil {
				continue
			}
			for _, o := range list.Items {
				ri := c.dyn.Resource(res).Namespace(o.GetNamespace())
				o.SetFinalizers(nil)
				_, _ = ri.Update(ctx, &o, metav1.UpdateOptions{})
				_ = ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{})
			}
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.mapper.Reset()
		if _, err := c.dyn.Resource(volumeSnapshots).Namespace(modesNamespace).List(context.Background(), metav1.ListOptions{}); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("the VolumeSnapshot CRD is not served after 30s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// deregisterDriver removes driver from the node's CSINode, as kubelet does
// when the driver's registration socket is removed.
func deregisterDriver(t *testing.T, c *cluster, driver, node string) {
	t.Helper()
	ctx := context.Background()
	cn, err := c.client.StorageV1().CSINodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cn.Spec.Drivers = slices.DeleteFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == driver })
	if _, err := c.client.StorageV1().CSINodes().Update(ctx, cn, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// oldDeploymentKubeconfig is the credentials of the old deployment's
// sidecars and of the snapshot-controller: a ServiceAccount bound to
// cluster-admin (democratic-csi's chart's RBAC is not what is tested).
func oldDeploymentKubeconfig(t *testing.T, c *cluster) string {
	t.Helper()
	ctx := context.Background()
	c.ensureNamespace(t, migOldNS)
	t.Cleanup(func() { c.deleteNamespace(t, migOldNS) })
	if _, err := c.client.CoreV1().ServiceAccounts(migOldNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "democratic-csi"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: migOldNS + "-admin"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "democratic-csi", Namespace: migOldNS}}}
	if _, err := c.client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.client.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
	})
	return c.kubeconfig(t, c.token(t, migOldNS, "democratic-csi"))
}

// createOldObjects makes the cluster objects of the old deployment from
// migValues: the CSIDriver, the StorageClass and the VolumeSnapshotClass.
func createOldObjects(t *testing.T, c *cluster) {
	t.Helper()
	ctx := context.Background()
	no, policy := false, storagev1.FileFSGroupPolicy
	drv := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: migDriver}, Spec: storagev1.CSIDriverSpec{
		AttachRequired: &no, PodInfoOnMount: &no, StorageCapacity: &no, FSGroupPolicy: &policy,
		VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}}}
	if _, err := c.client.StorageV1().CSIDrivers().Create(ctx, drv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wffc, del := storagev1.VolumeBindingWaitForFirstConsumer, corev1.PersistentVolumeReclaimDelete
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: migClass}, Provisioner: migDriver,
		Parameters: map[string]string{"connection": "local"}, ReclaimPolicy: &del, VolumeBindingMode: &wffc, AllowVolumeExpansion: &no}
	if _, err := c.client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vsc := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
		"metadata": map[string]any{"name": migSnapClass}, "driver": migDriver, "deletionPolicy": "Delete"}}
	if _, err := c.apply(ctx, vsc, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = c.client.StorageV1().CSIDrivers().Delete(ctx, migDriver, metav1.DeleteOptions{})
		_ = c.client.StorageV1().StorageClasses().Delete(ctx, migClass, metav1.DeleteOptions{})
		if r, err := c.resource(vsc); err == nil {
			_ = r.Delete(ctx, migSnapClass, metav1.DeleteOptions{})
		}
	})
}

// startDemocraticProxy runs democratic-csi's proxy in mode (controller or
// node) with the proxy config, as its chart runs it, on a socket in dir.
func startDemocraticProxy(t *testing.T, tree, cfg, dir, mode string) *plugin {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "csi.sock")
	args := []string{filepath.Join(tree, "bin", "democratic-csi"), "--csi-version=1.5.0", "--csi-name=" + migDriver,
		"--driver-config-file=" + cfg, "--log-level=info", "--csi-mode=" + mode, "--server-socket=" + sock}
	p := startProcess(t, "democratic-csi proxy "+mode, "node", args, envList(map[string]string{"CSI_NODE_ID": migNode, "NODE_NAME": migNode}))
	pl := &plugin{name: p.name, cmd: p.cmd, logs: p.logs, exited: p.exited, endpoint: "unix://" + sock}
	pl.ready(t)
	t.Cleanup(func() { pl.conn.Close() })
	return pl
}

// takeSnapshot snapshots claim with migSnapClass and returns the
// content's snapshot handle once it is ready.
func takeSnapshot(t *testing.T, c *cluster, name, claim string, procs []*process) string {
	t.Helper()
	ctx := context.Background()
	snap := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
		"metadata": map[string]any{"name": name, "namespace": modesNamespace},
		"spec":     map[string]any{"volumeSnapshotClassName": migSnapClass, "source": map[string]any{"persistentVolumeClaimName": claim}},
	}}
	if _, err := c.apply(ctx, snap, false); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		for _, p := range procs {
			p.alive(t)
		}
		got, err := c.dyn.Resource(volumeSnapshots).Namespace(modesNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ready, _, _ := unstructured.NestedBool(got.Object, "status", "readyToUse"); ready {
			content, _, _ := unstructured.NestedString(got.Object, "status", "boundVolumeSnapshotContentName")
			vsc, err := c.dyn.Resource(volumeSnapshotContents).Get(ctx, content, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			handle, _, _ := unstructured.NestedString(vsc.Object, "status", "snapshotHandle")
			return handle
		}
		if time.Now().After(deadline) {
			st, _, _ := unstructured.NestedMap(got.Object, "status")
			t.Fatalf("snapshot %s not ready after 90s: status %v", name, st)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// deleteSnapshot deletes the VolumeSnapshot and waits until it and every
// content (deletionPolicy Delete: DeleteSnapshot through the driver) are
// gone.
func deleteSnapshot(t *testing.T, c *cluster, name string, procs []*process) {
	t.Helper()
	ctx := context.Background()
	if err := c.dyn.Resource(volumeSnapshots).Namespace(modesNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		for _, p := range procs {
			p.alive(t)
		}
		_, err := c.dyn.Resource(volumeSnapshots).Namespace(modesNamespace).Get(ctx, name, metav1.GetOptions{})
		list, lerr := c.dyn.Resource(volumeSnapshotContents).List(ctx, metav1.ListOptions{})
		if lerr != nil {
			t.Fatal(lerr)
		}
		if apierrors.IsNotFound(err) && len(list.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("90s after deleting snapshot %s: snapshot %v, %d contents left", name, err, len(list.Items))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// kubectlGetJSON writes what `kubectl get pv -o json` and `kubectl get
// volumesnapshotcontent -o json` would print, and returns the two files.
func kubectlGetJSON(t *testing.T, c *cluster, dir string) (string, string) {
	t.Helper()
	ctx := context.Background()
	pvs, err := c.client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var items []any
	for i := range pvs.Items {
		pv := pvs.Items[i]
		pv.APIVersion, pv.Kind = "v1", "PersistentVolume"
		items = append(items, pv)
	}
	contents, err := c.dyn.Resource(volumeSnapshotContents).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var citems []any
	for _, it := range contents.Items {
		citems = append(citems, it.Object)
	}
	write := func(name string, items []any) string {
		b, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("pvs.json", items), write("volumesnapshotcontents.json", citems)
}

// publishAndRead stages and publishes pv through node, finds each file of
// want with its content in the target path, writes nothing, and
// unpublishes and unstages.
func publishAndRead(t *testing.T, node *plugin, pv *corev1.PersistentVolume, tmp string, want map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nc := csi.NewNodeClient(node.conn)
	staging := filepath.Join(tmp, "kubelet", pv.Name, "globalmount")
	target := filepath.Join(tmp, "kubelet", pv.Name, "mount")
	for _, d := range []string{staging, target} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	capability := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	id, volCtx := pv.Spec.CSI.VolumeHandle, pv.Spec.CSI.VolumeAttributes
	if _, err := nc.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging,
		VolumeCapability: capability, VolumeContext: volCtx}); err != nil {
		t.Fatalf("NodeStageVolume %s: %v", id, err)
	}
	if _, err := nc.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging,
		TargetPath: target, VolumeCapability: capability, VolumeContext: volCtx}); err != nil {
		t.Fatalf("NodePublishVolume %s: %v", id, err)
	}
	for name, content := range want {
		b, err := os.ReadFile(filepath.Join(target, name))
		if err != nil || string(b) != content {
			t.Errorf("volume %s published at %s: %s: %q, %v; want %q", id, target, name, b, err, content)
		} else {
			t.Logf("volume %s: %s read back through the new release", id, name)
		}
	}
	if _, err := nc.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Errorf("NodeUnpublishVolume %s: %v", id, err)
	}
	if _, err := nc.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Errorf("NodeUnstageVolume %s: %v", id, err)
	}
}

// CSI calls in the logs: democratic-csi's "new request - driver:
// CsiProxyDriver method: X", proxy-topology's rpc lines (text or JSON)
// with connection local.
var (
	dcsiCall  = regexp.MustCompile(`new request - driver: CsiProxyDriver method: (\w+)`)
	proxyCall = regexp.MustCompile(`(?m)^.*("msg":"rpc"|\brpc method=).*$`)
	fieldRe   = map[string]*regexp.Regexp{}
)

// logField is a field of a proxy-topology log line, JSON or text.
func logField(line, name string) string {
	re, ok := fieldRe[name]
	if !ok {
		re = regexp.MustCompile(`"` + name + `":"([^"]*)"|\b` + name + `=(\S+)`)
		fieldRe[name] = re
	}
	m := re.FindStringSubmatch(line)
	if m == nil {
		return ""
	}
	return m[1] + m[2]
}

func countDemocraticCalls(logs string) map[string]int {
	n := map[string]int{}
	for _, m := range dcsiCall.FindAllStringSubmatch(logs, -1) {
		n[m[1]]++
	}
	return n
}

func countProxyCalls(logs string) map[string]int {
	n := map[string]int{}
	for _, line := range proxyCall.FindAllString(logs, -1) {
		if logField(line, "connection") != "local" {
			continue
		}
		m := logField(line, "method")
		if code := logField(line, "code"); code != "OK" {
			m += "(" + code + ")"
		}
		n[m]++
	}
	return n
}

// summary lists the volume and snapshot calls of a count (a call that
// did not answer OK with its code).
func summary(n map[string]int) string {
	var out []string
	for _, m := range []string{"CreateVolume", "CreateSnapshot", "NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume", "DeleteSnapshot", "DeleteVolume", "ControllerExpandVolume"} {
		for _, k := range slices.Sorted(maps.Keys(n)) {
			if k == m || strings.HasPrefix(k, m+"(") {
				out = append(out, fmt.Sprintf("%s×%d", k, n[k]))
			}
		}
	}
	return strings.Join(out, ", ")
}
