package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/democratic-csi/proxy-topology/pkg/config"
	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
)

// The node-local deployment mode (deploy/node-local, SPEC §12) on two fake
// nodes, each with its own "disk": the DaemonSet's pod for each node (as
// the DaemonSet controller would make it) runs its proxy-topology (--mode
// all) and its real csi-provisioner (--node-deployment) as processes; the
// real scheduler places the pods.
const (
	nlConnection = "nl-disk"
	nlLabel      = "e2e.proxy-topology/node-local"
	nlDataPath   = "/var/lib/proxy-topology" // the overlay's hostPath for node-local data
)

var nlNodes = []string{"nl-node-a", "nl-node-b"}

// nlNode is one fake node of the node-local mode.
type nlNode struct {
	name        string
	data        string // the node's nlDataPath
	provisioner *process
}

// TestNodeLocalProvisioning: a WaitForFirstConsumer claim (the overlay's
// class) and an Immediate claim on a node-local connection each get a PV
// pinned by <prefix>/node to the node whose disk holds the directory; the
// pod using it is scheduled there, and a second pod of the same claim
// that may only run on the other node stays unschedulable.
func TestNodeLocalProvisioning(t *testing.T) {
	c := withControlPlane(t)
	ctx := context.Background()
	objs := decodeObjects(t, run(t, tools["KUSTOMIZE"], "build", "deploy/node-local"))
	c.dryRunAll(t, "deploy/node-local", objs)

	var ds *unstructured.Unstructured
	for _, o := range objs {
		switch {
		case o.GetKind() == "DaemonSet":
			ds = o
		case strings.HasPrefix(o.GetName(), "proxy-topology-node-external-"), // the overlay's RBAC
			o.GetKind() == "StorageClass" && o.GetName() == "proxy-topology-node-local":
			if _, err := c.apply(ctx, o, false); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if r, err := c.resource(o); err == nil {
					_ = r.Delete(context.Background(), o.GetName(), metav1.DeleteOptions{})
				}
			})
		}
	}
	if ds == nil {
		t.Fatal("deploy/node-local has no DaemonSet")
	}
	var daemonSet struct {
		Spec struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(ds.Object, &daemonSet); err != nil {
		t.Fatal(err)
	}
	class := "proxy-topology-node-local"
	sc, err := c.client.StorageV1().StorageClasses().Get(ctx, class, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sc.VolumeBindingMode == nil || *sc.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
		t.Fatalf("class %s is not WaitForFirstConsumer", class)
	}
	// The shipped class names connection "local"; this test's connection
	// is nlConnection, so it uses a copy of the class with that name, and
	// an Immediate twin.
	wffc, immediate := "nl-wffc", "nl-immediate"
	for name, mode := range map[string]storagev1.VolumeBindingMode{wffc: storagev1.VolumeBindingWaitForFirstConsumer, immediate: storagev1.VolumeBindingImmediate} {
		cp := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: sc.Provisioner, ReclaimPolicy: sc.ReclaimPolicy,
			VolumeBindingMode: &mode, Parameters: map[string]string{"connection": nlConnection}}
		if _, err := c.client.StorageV1().StorageClasses().Create(ctx, cp, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.client.StorageV1().StorageClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	setSecretKey(t, c, nlConnection+".yaml", fmt.Sprintf("driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s/%s\n", nlDataPath, nlConnection))

	nodes := map[string]*nlNode{}
	for _, name := range nlNodes {
		nodes[name] = startNodeLocalNode(t, c, name, daemonSet.Spec.Template)
	}
	ensureModesNamespace(t, c)

	// The first consumer of the WaitForFirstConsumer claim may only run on
	// nl-node-b, so that node's provisioner is the one that must act; the
	// Immediate claim goes to whichever provisioner selects its own node
	// first, and its pod may run anywhere.
	for _, tc := range []struct {
		class, claim string
		selector     map[string]string
	}{
		{wffc, "nl-first-consumer", map[string]string{nlLabel: "true", prefix + "/node": nlNodes[1]}},
		{immediate, "nl-immediate", map[string]string{nlLabel: "true"}},
	} {
		t.Run(tc.class, func(t *testing.T) {
			start := time.Now()
			createClaim(t, c, tc.claim, tc.class)
			t.Cleanup(func() {
				_ = c.client.CoreV1().PersistentVolumeClaims(modesNamespace).Delete(context.Background(), tc.claim, metav1.DeleteOptions{})
			})
			pod := tc.claim + "-1"
			createPod(t, c, pod, tc.claim, tc.selector)
			t.Cleanup(func() { deletePod(t, c, pod) })
			pv, on := nlWaitBound(t, c, nodes, tc.claim, pod)
			t.Logf("%s: bound and scheduled on %s in %s", tc.claim, on, time.Since(start).Round(100*time.Millisecond))

			// The PV is pinned to one node, the one whose disk holds it.
			terms, err := affinityTerms(pv)
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{prefix + "/node=" + on}; fmt.Sprint(terms) != fmt.Sprint(want) {
				t.Errorf("PV %s node affinity %v, want %v", pv.Name, terms, want)
			}
			id := hostpath.VolumeDir(pv.Spec.CSI.VolumeHandle[strings.LastIndex(pv.Spec.CSI.VolumeHandle, "/")+1:])
			for _, n := range nodes {
				has, err := recorded(filepath.Join(n.data, nlConnection, "volumes", id))
				if has != (n.name == on) {
					t.Errorf("volume %s: recorded on %s's disk: %v (%v; the pod runs on %s)", id, n.name, has, err, on)
				}
			}

			// A second pod of the claim that may only run on the other node
			// cannot be placed.
			other := nlNodes[0]
			if other == on {
				other = nlNodes[1]
			}
			pod2 := tc.claim + "-2"
			createPod(t, c, pod2, tc.claim, map[string]string{nlLabel: "true", prefix + "/node": other})
			t.Cleanup(func() { deletePod(t, c, pod2) })
			msg := (&stack{c: c}).schedulingMessage(t, pod2)
			if !strings.Contains(msg, "didn't match PersistentVolume's node affinity") {
				t.Errorf("pod %s (only %s) is unschedulable for another reason: %s", pod2, other, msg)
			}

			// Deleting the claim deletes the volume on its node (only the
			// holding node's provisioner considers the PV its own).
			deletePod(t, c, pod)
			deletePod(t, c, pod2)
			if err := c.client.CoreV1().PersistentVolumeClaims(modesNamespace).Delete(context.Background(), tc.claim, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			(&stack{c: c}).waitGone(t, pv.Name, filepath.Join(nodes[on].data, nlConnection, "volumes", id))
		})
	}
}

// startNodeLocalNode makes node name schedulable with the DaemonSet's pod
// on it: the Pod object (template + nodeName, as the DaemonSet controller
// makes it) is created in the API, and its proxy-topology container runs
// as a process, its node plugin is registered as kubelet would, then its
// csi-provisioner runs. The node and its CSINode are removed when the
// test ends, so other tests' clusters look as before.
func startNodeLocalNode(t *testing.T, c *cluster, name string, tmpl corev1.PodTemplateSpec) *nlNode {
	t.Helper()
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{nlLabel: "true"}}}
	if _, err := c.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.client.StorageV1().CSINodes().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = c.client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	// Owned by the DaemonSet, as its controller makes it: the provisioner
	// finds the owner of its capacity objects through it. (The deployed
	// DaemonSet object stands in for deploy/node-local's.)
	owner, err := c.client.AppsV1().DaemonSets(Namespace).Get(ctx, "proxy-topology-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := daemonSetPod(t, c, owner, tmpl, name)
	n := &nlNode{name: name}

	ctr := r.container(t, "proxy-topology")
	for _, m := range ctr.VolumeMounts {
		if m.MountPath == nlDataPath {
			n.data = r.volumes[m.Name]
		}
	}
	if n.data == "" {
		t.Fatalf("the DaemonSet's proxy-topology container mounts nothing at %s", nlDataPath)
	}
	// The connection file names the path inside the container; this
	// process sees the node's directory where the mount would put it.
	rebaseShareBasePath(t, filepath.Join(r.volumes["connections"], nlConnection+".yaml"), nlDataPath, n.data)
	p := startNodeContainer(t, r)
	info := nodeInfo(t, p)
	if got := info.GetAccessibleTopology().GetSegments()[prefix+"/node"]; got != name {
		t.Fatalf("%s: NodeGetInfo %v lacks %s/node=%s", name, info, prefix, name)
	}
	if err := register(c.client, name, info); err != nil {
		t.Fatal(err)
	}
	if err := schedulable(ctx, c, name, map[string]string{nlLabel: "true"}); err != nil {
		t.Fatal(err)
	}
	n.provisioner, _ = sidecar(t, r, "csi-provisioner", "CSI_PROVISIONER")
	return n
}

// setSecretKey puts one connection file into the connections Secret, and
// takes it out again when the test ends.
func setSecretKey(t *testing.T, c *cluster, key, value string) {
	t.Helper()
	editConnections(t, c, func(d map[string][]byte) { d[key] = []byte(value) })
	t.Cleanup(func() { editConnections(t, c, func(d map[string][]byte) { delete(d, key) }) })
}

// nlWaitBound waits for the claim to be Bound and the pod scheduled, and
// returns the PV and the pod's node.
func nlWaitBound(t *testing.T, c *cluster, nodes map[string]*nlNode, claim, pod string) (*corev1.PersistentVolume, string) {
	t.Helper()
	ctx := context.Background()
	// The Immediate claim waits for a provisioner to select its node
	// after a random delay of up to --node-deployment-base-delay (20s).
	deadline := time.Now().Add(90 * time.Second)
	for {
		for _, n := range nodes {
			n.provisioner.alive(t)
		}
		pvc, err := c.client.CoreV1().PersistentVolumeClaims(modesNamespace).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := c.client.CoreV1().Pods(modesNamespace).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pvc.Status.Phase == corev1.ClaimBound && p.Spec.NodeName != "" {
			pv, err := c.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return pv, p.Spec.NodeName
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 90s: claim %s is %s (annotations %v), pod %s on node %q (conditions %v)\nevents:\n%s",
				claim, pvc.Status.Phase, pvc.Annotations, pod, p.Spec.NodeName, p.Status.Conditions, (&stack{c: c}).events(t))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestNodeLocalChart: the chart's node-local mode (nodeLocal.enabled,
// controller.enabled false) is accepted by the API server, renders no
// controller Deployment, and its DaemonSet runs what deploy/node-local
// runs: the proxy with --mode=all and proxy.nodeLocal, and a provisioner
// and snapshotter with the same flags.
func TestNodeLocalChart(t *testing.T) {
	c := getCluster(t)
	c.ensureNamespace(t, Namespace)
	chart := helmTemplate(t, "--set", "nodeLocal.enabled=true", "--set", "controller.enabled=false")
	c.dryRunAll(t, "helm template (nodeLocal)", chart)
	kust := decodeObjects(t, run(t, tools["KUSTOMIZE"], "build", "deploy/node-local"))
	daemonSet := func(objs []*unstructured.Unstructured, what string) *corev1.PodSpec {
		var spec *corev1.PodSpec
		for _, o := range objs {
			switch o.GetKind() {
			case "Deployment":
				t.Errorf("%s renders Deployment %s; node-local mode has no controller Deployment", what, o.GetName())
			case "DaemonSet":
				var ds struct {
					Spec struct {
						Template corev1.PodTemplateSpec `json:"template"`
					} `json:"spec"`
				}
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &ds); err != nil {
					t.Fatal(err)
				}
				spec = &ds.Spec.Template.Spec
			}
		}
		if spec == nil {
			t.Fatalf("%s renders no DaemonSet", what)
		}
		return spec
	}
	args := func(spec *corev1.PodSpec, name string) []string {
		for _, ctr := range spec.Containers {
			if ctr.Name == name {
				return ctr.Args
			}
		}
		t.Errorf("no container %s", name)
		return nil
	}
	h, k := daemonSet(chart, "helm"), daemonSet(kust, "deploy/node-local")
	for _, name := range []string{"csi-provisioner", "csi-snapshotter"} {
		if a, b := args(h, name), args(k, name); fmt.Sprint(a) != fmt.Sprint(b) {
			t.Errorf("%s args: chart %v, deploy/node-local %v", name, a, b)
		}
	}
	for what, spec := range map[string]*corev1.PodSpec{"helm": h, "deploy/node-local": k} {
		if a := args(spec, "proxy-topology"); !strings.Contains(strings.Join(a, " "), "--mode=all") {
			t.Errorf("%s: proxy-topology args %v lack --mode=all", what, a)
		}
	}
	// The main config, read by proxy-topology's own loader: exactly one
	// ConfigMap holds it, and it says proxy.nodeLocal: true.
	var mains []string
	for _, o := range chart {
		data, found, err := unstructured.NestedString(o.Object, "data", "proxy.yaml")
		if o.GetKind() != "ConfigMap" || !found || err != nil {
			continue
		}
		mains = append(mains, o.GetName())
		l, err := config.LoadMain("ConfigMap "+o.GetName()+" proxy.yaml", []byte(data), nil)
		if err != nil {
			t.Errorf("the chart's main config does not load: %v", err)
		} else if !l.Proxy.NodeLocal {
			t.Errorf("the chart's main config (ConfigMap %s) has proxy.nodeLocal false:\n%s", o.GetName(), data)
		}
	}
	if len(mains) != 1 {
		t.Errorf("the chart renders %d ConfigMaps with proxy.yaml (%v), want 1", len(mains), mains)
	}
}

// rebaseShareBasePath edits the connection file at path as data: its
// local-hostpath.shareBasePath, which must be under from (the path inside
// the container), moves to the same place under to (where this process
// sees the node's directory).
func rebaseShareBasePath(t *testing.T, path, from, to string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var conn map[string]any
	if err := yaml.Unmarshal(data, &conn); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	base, found, err := unstructured.NestedString(conn, "local-hostpath", "shareBasePath")
	if err != nil || !found {
		t.Fatalf("%s: no local-hostpath.shareBasePath (%v)", path, err)
	}
	rel, err := filepath.Rel(from, base)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		t.Fatalf("%s: shareBasePath %s is not under %s", path, base, from)
	}
	if err := unstructured.SetNestedField(conn, filepath.Join(to, rel), "local-hostpath", "shareBasePath"); err != nil {
		t.Fatal(err)
	}
	if data, err = yaml.Marshal(conn); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
