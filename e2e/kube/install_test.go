package kube

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// seedValues is the Helm example of the original proxy's topology
// proposal ("Topology support in Helm values"), copied verbatim: the chart
// must accept what its users already wrote.
const seedValues = "e2e/kube/testdata/seed-values.yaml"

// seedValuesSHA256 is the SHA-256 of that example as it was copied.
const seedValuesSHA256 = "2f5b3b0d71ee8e0b2dbc77d5ff87ecc3245cbceacd482cac1c396b027ad549b7"

// TestSeedValuesAreVerbatim: testdata/seed-values.yaml is still the
// example as it was copied, byte for byte, so TestSeedValuesInstall tests
// what users wrote and not an example edited to suit the chart.
func TestSeedValuesAreVerbatim(t *testing.T) {
	got, err := os.ReadFile(filepath.Join(repoRoot, seedValues))
	if err != nil {
		t.Fatal(err)
	}
	if sum := fmt.Sprintf("%x", sha256.Sum256(got)); sum != seedValuesSHA256 {
		t.Errorf("%s was edited (SHA-256 %s, copied as %s): it must stay the example users wrote; test the chart's own settings in other values files", seedValues, sum, seedValuesSHA256)
	}
}

// TestSeedValuesInstall renders the chart with the seed's Helm example as
// it is written and installs the result on the real API server, in a
// namespace of its own (release "seed"): the Deployment and DaemonSet are
// created for real and the controller-manager makes their controller Pod,
// whose containers then run and bind a claim (bindThroughSeedRelease).
// The cluster-wide CSIDriver and StorageClasses, which the deployed
// manifests already own under the same names, are checked with a
// server-side dry run. The seed's literal connections volume and mount
// replace the chart's (one each), its topology flags appear once each,
// and the flags the chart's settings require (capacity tracking) are
// still there although the seed's extraArgs omit them.
func TestSeedValuesInstall(t *testing.T) {
	c := withControlPlane(t)
	ctx := context.Background()
	const ns = "e2e-seed"
	c.ensureNamespace(t, ns)
	t.Cleanup(func() { c.deleteNamespace(t, ns) })
	objs := decodeObjects(t, run(t, tools["HELM"], "template", "seed", "deploy/helm/proxy-topology", "--namespace", ns, "--values", seedValues))
	var ctrl, node *unstructured.Unstructured
	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment":
			ctrl = o
		case "DaemonSet":
			node = o
		}
	}
	if ctrl == nil || node == nil {
		t.Fatal("the seed's values render no Deployment or no DaemonSet")
	}
	prov := strs(container(t, ctrl, "csi-provisioner")["args"])
	for _, f := range []string{"--feature-gates=Topology=true", "--strict-topology=true", "--immediate-topology=false", "--enable-capacity", "--capacity-ownerref-level=2", "--leader-election"} {
		if n := count(prov, f); n != 1 {
			t.Errorf("csi-provisioner has %s %d times: %v", f, n, prov)
		}
	}
	vols, _, _ := unstructured.NestedSlice(ctrl.Object, "spec", "template", "spec", "volumes")
	if n := count(strs(vols), "connections"); n != 1 {
		t.Errorf("the controller has %d volumes named connections: %v", n, strs(vols))
	}
	var at []string
	mounts, _ := container(t, ctrl, "proxy-topology")["volumeMounts"].([]any)
	for _, m := range mounts {
		if mm := m.(map[string]any); mm["mountPath"] == "/mnt/connections" {
			at = append(at, mm["name"].(string))
		}
	}
	if diff := cmp.Diff([]string{"connections"}, at); diff != "" {
		t.Errorf("mounts at /mnt/connections (-want +got):\n%s", diff)
	}

	var cluster []*unstructured.Unstructured
	for _, o := range objs {
		switch o.GetKind() {
		case "CSIDriver", "StorageClass":
			cluster = append(cluster, o)
			continue
		}
		if _, err := c.apply(ctx, o, false); err != nil {
			t.Errorf("installing %s: %v", key(o), err)
		}
		if o.GetNamespace() == "" {
			t.Cleanup(func() {
				if r, err := c.resource(o); err == nil {
					_ = r.Delete(ctx, o.GetName(), metav1.DeleteOptions{})
				}
			})
		}
	}
	c.dryRunAll(t, "seed values (cluster-wide objects)", cluster)
	// The Deployment became a Pod, scheduled onto a node.
	if !t.Failed() {
		createNodes(t, c)
		for name := range stackNodes {
			if err := schedulable(ctx, c, name, nil); err != nil {
				t.Fatal(err)
			}
		}
		sel, _, _ := unstructured.NestedStringMap(ctrl.Object, "spec", "selector", "matchLabels")
		pod := waitPod(t, c, ns, metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: sel}))
		t.Logf("controller pod %s on %s", pod.Name, pod.Spec.NodeName)
		bindThroughSeedRelease(t, c, pod, node.GetName())
	}
}

func count(l []string, s string) int {
	n := 0
	for _, e := range l {
		if e == s {
			n++
		}
	}
	return n
}

// deleteNamespace deletes a namespace of a test and waits until it is gone
// or terminating (no namespace controller runs, so its objects are deleted
// here first).
func (c *cluster) deleteNamespace(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	zero := int64(0)
	_ = c.client.AppsV1().Deployments(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	_ = c.client.AppsV1().DaemonSets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	_ = c.client.AppsV1().ReplicaSets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	_ = c.client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	// kube-scheduler reads capacity from every namespace: a release's
	// capacity must not outlive it.
	_ = c.client.StorageV1().CSIStorageCapacities(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	if err := c.client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting namespace %s: %v", ns, err)
	}
}

// adminKubeconfig writes a kubeconfig with the admin's client certificate,
// for helm.
func (c *cluster) adminKubeconfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := c.writeKubeconfig(path, &clientcmdapi.AuthInfo{ClientCertificateData: c.pki.adminCertPEM, ClientKeyData: c.pki.adminKeyPEM}); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestHelmUpgradeKeepsConnections: the chart's behaviour on `helm upgrade`
// against the real API server. The chart owns the keys of its
// `connections` value; a key the user added to the Secret with kubectl
// survives upgrades (Helm's three-way merge), a changed key is updated, a
// key dropped from the values is removed, and `helm uninstall` leaves the
// Secret (resource-policy keep). Only the Secret and the main config are
// rendered (the workloads and classes are off), under a driver name of
// its own.
func TestHelmUpgradeKeepsConnections(t *testing.T) {
	c := deployed(t)
	ctx := context.Background()
	const ns = "e2e-helm-upgrade"
	kc := c.adminKubeconfig(t)
	helm := func(args ...string) {
		t.Helper()
		cmd := exec.Command(tools["HELM"], append(args, "--kubeconfig", kc, "--namespace", ns)...)
		cmd.Dir = repoRoot
		home := t.TempDir()
		cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CACHE_HOME="+home, "XDG_CONFIG_HOME="+home, "XDG_DATA_HOME="+home)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
	}
	common := []string{"deploy/helm/proxy-topology", "--set", "csiDriver.name=upgrade.e2e.proxy-topology",
		"--set", "controller.enabled=false", "--set", "node.enabled=false", "--set", "rbac.nodeLabels=false",
		"--set-json", "storageClasses=[]", "--set-json", "volumeSnapshotClasses=[]"}
	conn := func(name, base string) []string {
		return []string{"--set-string", "connections." + name + "=driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: " + base + "\n"}
	}
	t.Cleanup(func() { c.deleteNamespace(t, ns) })
	c.ensureNamespace(t, ns)
	helm(append(append([]string{"install", "upgrade"}, common...), conn("alpha", "/a1")...)...)

	secrets := c.client.CoreV1().Secrets(ns)
	read := func() map[string]string {
		t.Helper()
		s, err := secrets.Get(ctx, "connections", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for k, v := range s.Data {
			out[k] = strings.TrimSpace(strings.TrimPrefix(string(v), "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: "))
		}
		return out
	}
	if diff := cmp.Diff(map[string]string{"alpha.yaml": "/a1"}, read()); diff != "" {
		t.Fatalf("after install (-want +got):\n%s", diff)
	}
	// The user adds a connection with kubectl.
	s, err := secrets.Get(ctx, "connections", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data["mine.yaml"] = []byte("driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: /mine\n")
	if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	helm(append(append(append([]string{"upgrade", "upgrade"}, common...), conn("alpha", "/a2")...), conn("beta", "/b")...)...)
	if diff := cmp.Diff(map[string]string{"alpha.yaml": "/a2", "beta.yaml": "/b", "mine.yaml": "/mine"}, read()); diff != "" {
		t.Errorf("after an upgrade that changes alpha and adds beta (-want +got):\n%s", diff)
	}
	helm(append(append([]string{"upgrade", "upgrade"}, common...), conn("beta", "/b")...)...)
	if diff := cmp.Diff(map[string]string{"beta.yaml": "/b", "mine.yaml": "/mine"}, read()); diff != "" {
		t.Errorf("after an upgrade that drops alpha (-want +got):\n%s", diff)
	}
	helm("uninstall", "upgrade")
	if diff := cmp.Diff(map[string]string{"beta.yaml": "/b", "mine.yaml": "/mine"}, read()); diff != "" {
		t.Errorf("after helm uninstall (-want +got):\n%s", diff)
	}
	if _, err := c.client.CoreV1().ConfigMaps(ns).Get(ctx, "upgrade-proxy-topology-config", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("helm uninstall left the ConfigMap: %v", err)
	}
}

// TestReapplyKeepsConnections: deploy/kubernetes ships no connections
// Secret, so applying the manifests again (an upgrade) leaves the user's
// connections as they are; the pods mount the Secret as optional, so they
// start before it exists. (That a running controller still serves the
// user's connections after a re-apply is TestConnectionsFromSecret's.)
func TestReapplyKeepsConnections(t *testing.T) {
	c := deployed(t)
	ctx := context.Background()
	objs := kustomizeBuild(t)
	for _, o := range objs {
		if o.GetKind() == "Secret" {
			t.Errorf("deploy/kubernetes ships Secret %s", o.GetName())
		}
	}
	editConnections(t, c, func(data map[string][]byte) {
		data["user-kept.yaml"] = []byte("driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: /kept\n")
	})
	t.Cleanup(func() { editConnections(t, c, func(data map[string][]byte) { delete(data, "user-kept.yaml") }) })
	for _, o := range objs {
		if _, err := c.apply(ctx, o, false); err != nil {
			t.Fatalf("re-applying %s: %v", key(o), err)
		}
	}
	s, err := c.client.CoreV1().Secrets(Namespace).Get(ctx, "connections", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(s.Data["user-kept.yaml"], []byte("/kept")) {
		t.Errorf("re-applying deploy/kubernetes changed the user's connections: keys %v", keys(s.Data))
	}
	for _, o := range objs {
		if o.GetKind() != "Deployment" && o.GetKind() != "DaemonSet" {
			continue
		}
		vols, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "volumes")
		for _, v := range vols {
			vm := v.(map[string]any)
			if name, _, _ := unstructured.NestedString(vm, "secret", "secretName"); name == "connections" {
				if opt, _, _ := unstructured.NestedBool(vm, "secret", "optional"); !opt {
					t.Errorf("%s: the connections Secret volume is not optional", key(o))
				}
			}
		}
	}
}

// waitFor polls check until it returns true or the timeout passes.
func waitFor(t *testing.T, what string, timeout time.Duration, check func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := check()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s: %s", what, timeout, state)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestWalkthroughValues: the values docs/kubernetes.md has a new user add
// to the seed's ("From the seed's values to a bound volume", step 3)
// render with the seed's into the connection's Secret key, the upstream's
// socket in both workloads beside the seed's connections volume, and the
// first-consumer class, and the API server accepts every object (dry run).
func TestWalkthroughValues(t *testing.T) {
	c := deployed(t)
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "kubernetes.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "in `my-values.yaml`")
	_, rest, ok2 := strings.Cut(rest, "```yaml\n")
	block, _, ok3 := strings.Cut(rest, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/kubernetes.md has no my-values.yaml block")
	}
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		lines = append(lines, strings.TrimPrefix(l, "   "))
	}
	path := filepath.Join(t.TempDir(), "my-values.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	objs := helmTemplate(t, "-f", seedValues, "-f", path)
	byK := byKey(objs)
	sec, ok := byK["Secret/"+Namespace+"/connections"]
	if !ok {
		t.Fatal("no connections Secret rendered")
	}
	if data, _, _ := unstructured.NestedStringMap(sec.Object, "data"); data["nfs-zone1.yaml"] == "" {
		t.Errorf("the Secret has no nfs-zone1.yaml: %v", keys(data))
	}
	for _, w := range []string{"Deployment/" + Namespace + "/proxy-topology-controller", "DaemonSet/" + Namespace + "/proxy-topology-node"} {
		o := byK[w]
		vols, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "volumes")
		names := strs(vols)
		if count(names, "connections") != 1 || count(names, "nfs-socket") != 1 {
			t.Errorf("%s: volumes %v, want connections and nfs-socket once each", w, names)
		}
		if m := strs(container(t, o, "proxy-topology")["volumeMounts"]); count(m, "nfs-socket") != 1 || count(m, "connections") != 1 {
			t.Errorf("%s: mounts %v", w, m)
		}
	}
	sc, ok := byK["StorageClass/nfs-zone1"]
	if mode, _, _ := unstructured.NestedString(sc.Object, "volumeBindingMode"); !ok || mode != "WaitForFirstConsumer" {
		t.Errorf("StorageClass nfs-zone1: rendered %v, volumeBindingMode %q", ok, mode)
	}
	c.dryRunAll(t, "the walk-through's values", objs)
}
