package kube

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// rnWorkloadPod is the test workload's pod: the workload image (built
// here, never pulled) writing <pod name> to /data/hello on the claim and
// reading it back every second; hostNetwork (no pod network), tolerating
// the NotReady nodes, and in zone when zone is set (the label kubelet put
// on the Node).
func rnWorkloadPod(labels map[string]string, claim, zone string, args ...string) corev1.PodTemplateSpec {
	spec := corev1.PodSpec{
		HostNetwork:                   true,
		AutomountServiceAccountToken:  ptr.To(false),
		TerminationGracePeriodSeconds: ptr.To[int64](1),
		Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		Containers: []corev1.Container{{
			Name: "workload", Image: imageRef("workload:1"), ImagePullPolicy: corev1.PullNever,
			Args: append([]string{"-file=/data/hello"}, args...),
			Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
		}},
	}
	if claim != "" {
		spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
	}
	if zone != "" {
		spec.NodeSelector = map[string]string{rnZoneKey: zone}
	}
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec}
}

func rnClaim(name, class string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: rnNamespace},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(class),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")}},
		},
	}
}

// rnDeploy creates a claim of class and a one-replica Deployment whose
// pod mounts it, and returns the running pod.
func (r *realNodes) rnDeploy(t *testing.T, ctx context.Context, name, class, zone string) *corev1.Pod {
	t.Helper()
	if _, err := r.c.client.CoreV1().PersistentVolumeClaims(rnNamespace).Create(ctx, rnClaim(name, class), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: rnNamespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: rnWorkloadPod(labels, name, zone),
		},
	}
	if _, err := r.c.client.AppsV1().Deployments(rnNamespace).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return r.waitPod(t, ctx, "app="+name)
}

// waitPod waits for the one pod of selector to run, and returns it.
func (r *realNodes) waitPod(t *testing.T, ctx context.Context, selector string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	waitFor(t, "a running pod "+selector, 2*time.Minute, func() (bool, string) {
		pods, err := r.c.client.CoreV1().Pods(rnNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err.Error()
		}
		var states []string
		for i := range pods.Items {
			p := &pods.Items[i]
			if podRunning(p) {
				pod = p
				return true, ""
			}
			states = append(states, p.Name+" on "+p.Spec.NodeName+": "+podState(p))
		}
		return false, strings.Join(states, "; ")
	})
	return pod
}

// allMetrics returns every node plugin's call counts, by node name.
func (r *realNodes) allMetrics(t *testing.T, ctx context.Context) map[string]map[string]int {
	t.Helper()
	out := map[string]map[string]int{}
	for _, n := range r.nodes {
		m, err := n.metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out[n.name] = m
	}
	return out
}

// node returns the real node named name.
func (r *realNodes) node(t *testing.T, name string) *realNode {
	t.Helper()
	for _, n := range r.nodes {
		if n.name == name {
			return n
		}
	}
	t.Fatalf("no real node %q", name)
	return nil
}

// fileWith finds, under dir, the file named hello that holds content
// (the workload's file in a connection's storage).
func fileWith(dir, content string) (string, error) {
	var found string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "hello" {
			return err
		}
		if b, err := os.ReadFile(path); err == nil && string(b) == content {
			found = path
			return fs.SkipAll
		}
		return nil
	})
	if err == nil && found == "" {
		err = fmt.Errorf("no file hello holding %q under %s", content, dir)
	}
	return found, err
}

// stagingPath is where kubelet stages a volume of the driver (its
// device mount path: the SHA-256 of the handle under the driver's
// plugin directory).
func stagingPath(handle string) string {
	return fmt.Sprintf("/plugins/kubernetes.io/csi/%s/%x/globalmount", rnDriver, sha256.Sum256([]byte(handle)))
}

// callDelta returns after minus before for the keys of after.
func callDelta(before, after map[string]int) map[string]int {
	d := map[string]int{}
	for k, v := range after {
		if v-before[k] != 0 {
			d[k] = v - before[k]
		}
	}
	return d
}

// rnVolumeCycle is the life of one claim of class with a pod on real
// nodes: the pod runs where the claim can be (placed by kube-scheduler,
// in zone when set), the container wrote its file, which is in the
// connection's storage dir (storage/<storageDir>); kubelet published
// through the node plugin (one NodeStageVolume and one NodePublishVolume
// on that node for the connection, none on the other); deleting the
// Deployment unpublishes and unstages (one NodeUnpublishVolume and one
// NodeUnstageVolume, no mount of the volume left in the node's mount
// namespace); deleting the claim deletes the volume (its directory).
//
// It returns the node the pod ran on and that node plugin's calls (OK,
// from its metrics) over the whole cycle.
func (r *realNodes) rnVolumeCycle(t *testing.T, name, class, conn, zone, storageDir string) (*realNode, map[string]int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	before := r.allMetrics(t, ctx)
	start := time.Now()
	pod := r.rnDeploy(t, ctx, name, class, zone)
	n := r.node(t, pod.Spec.NodeName)
	// A zone's storage is only reachable in that zone.
	if strings.HasPrefix(storageDir, "z") && n.zone != storageDir {
		t.Errorf("pod %s runs on %s in zone %s, want zone %s (its storage's)", pod.Name, n.name, n.zone, storageDir)
	}
	claim, err := r.c.client.CoreV1().PersistentVolumeClaims(rnNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pvName := claim.Spec.VolumeName
	pv, err := r.c.client.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(pv.Spec.CSI.VolumeHandle, "v:"+conn+"/") {
		t.Errorf("PV %s handle %q, want one of connection %s", pvName, pv.Spec.CSI.VolumeHandle, conn)
	}
	var file string
	waitFor(t, "the workload's file in storage/"+storageDir, 30*time.Second, func() (bool, string) {
		var err error
		file, err = fileWith(filepath.Join(r.storage, storageDir), pod.Name)
		return err == nil, fmt.Sprint(err)
	})
	mounts, err := n.mountinfo()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(mounts, "/volumes/kubernetes.io~csi/"+pvName+"/mount") {
		t.Errorf("no mount of %s in %s's mount namespace", pvName, n.name)
	}
	staging := stagingPath(pv.Spec.CSI.VolumeHandle)
	if !strings.Contains(mounts, staging) {
		t.Errorf("no staging mount %s in %s's mount namespace", staging, n.name)
	}
	after, err := n.metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	published := callDelta(before[n.name], after)
	t.Logf("pod %s on %s (zone %s) in %s; file %s; node plugin calls for it %v", pod.Name, n.name, n.zone, time.Since(start).Round(time.Millisecond), file, published)
	for _, m := range []string{"NodeStageVolume", "NodePublishVolume"} {
		if got := published[m+" "+conn]; got != 1 {
			t.Errorf("%s on %s for %s: %d calls, want 1 (all %v)", m, n.name, conn, got, published)
		}
	}
	for _, o := range r.nodes {
		if o == n {
			continue
		}
		m, err := o.metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d := callDelta(before[o.name], m); d["NodePublishVolume "+conn] != 0 || d["NodeStageVolume "+conn] != 0 {
			t.Errorf("%s, where the pod does not run, published: %v", o.name, d)
		}
	}

	// Deleting the pod's Deployment unpublishes.
	if err := r.c.client.AppsV1().Deployments(rnNamespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod's volume unmounted on "+n.name, time.Minute, func() (bool, string) {
		_, err := r.c.client.CoreV1().Pods(rnNamespace).Get(ctx, pod.Name, metav1.GetOptions{})
		mounts, merr := n.mountinfo()
		return apierrors.IsNotFound(err) && merr == nil && !strings.Contains(mounts, pvName) && !strings.Contains(mounts, staging),
			fmt.Sprintf("pod: %v; mount table: %v", err, merr)
	})
	final, err := n.metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	unpublished := callDelta(after, final)
	for _, m := range []string{"NodeUnpublishVolume", "NodeUnstageVolume"} {
		if got := unpublished[m+" "+conn]; got != 1 {
			t.Errorf("%s on %s for %s: %d calls, want 1 (all %v)", m, n.name, conn, got, unpublished)
		}
	}
	t.Logf("after the pod: node plugin calls %v", unpublished)

	// Deleting the claim deletes the PV and the volume's directory.
	if err := r.c.client.CoreV1().PersistentVolumeClaims(rnNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "PV "+pvName+" and its directory deleted", time.Minute, func() (bool, string) {
		_, err := r.c.client.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
		_, ferr := os.Stat(file)
		return apierrors.IsNotFound(err) && errors.Is(ferr, fs.ErrNotExist), fmt.Sprintf("PV: %v; file: %v", err, ferr)
	})
	return n, callDelta(before[n.name], final)
}

// TestRealNodeStorageClasses: the three StorageClass kinds with pods
// that kubelet runs. An Immediate class without requirements (hp-any,
// storage every node sees), an allowedTopologies class (zone z2 only,
// connection hp-z2: the pod, placed by kube-scheduler from the PV's node
// affinity, lands in z2) and a strict-topology WaitForFirstConsumer class
// (connection hp-z1, the pod asks for zone z1 by the label kubelet made):
// each claim is provisioned where its pod can run, kubelet publishes it
// through the node plugin, the container writes its file, and the file is
// in that connection's storage.
func TestRealNodeStorageClasses(t *testing.T) {
	r := withRealNodes(t)
	for _, tc := range []struct {
		name, class, conn, zone, dir string
	}{
		{"immediate", "rn-immediate", "hp-any", "", "any"},
		{"allowed", "rn-allowed", "hp-z2", "", "z2"},
		{"first-consumer", "rn-first-consumer", "hp-z1", "z1", "z1"},
	} {
		t.Run(tc.class, func(t *testing.T) {
			r.rnVolumeCycle(t, "sc-"+tc.name, tc.class, tc.conn, tc.zone, tc.dir)
		})
	}
}

// TestRealNodeGroupSpread: one StorageClass across zones. Class rn-group
// (WaitForFirstConsumer) names the group hp-group, members hp-z1 and
// hp-z2; a StatefulSet of two replicas spread over the zones by the
// label kubelet put on the Nodes. Each replica's claim is provisioned on
// the member serving its pod's zone, kubelet publishes it on that node
// through that member, and the pod's file is in that zone's storage.
//
// podManagementPolicy is Parallel: both pods are scheduled at once, and
// kube-scheduler's spread still puts them in different zones. It counts
// only nodes that carry the zone label, so the suite starts no test
// before kubelet has labelled every node (realNodes.register): a node
// still without it is no domain of the spread, and both pods could land
// in the other zone.
func TestRealNodeGroupSpread(t *testing.T) {
	r := withRealNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const name = "spread"
	labels := map[string]string{"app": name}
	tmpl := rnWorkloadPod(labels, "", "")
	tmpl.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: rnZoneKey, WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
	}}
	claim := rnClaim("data", "rn-group")
	claim.Namespace = ""
	ss := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: rnNamespace},
		Spec: appsv1.StatefulSetSpec{
			Replicas:             ptr.To(int32(len(r.nodes))),
			Selector:             &metav1.LabelSelector{MatchLabels: labels},
			PodManagementPolicy:  appsv1.ParallelPodManagement,
			Template:             tmpl,
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{*claim},
		},
	}
	before := r.allMetrics(t, ctx)
	start := time.Now()
	if _, err := r.c.client.AppsV1().StatefulSets(rnNamespace).Create(ctx, ss, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	zones := map[string]string{}
	var pvs []string
	for i := range len(r.nodes) {
		podName := fmt.Sprintf("%s-%d", name, i)
		pod := r.waitPod(t, ctx, "statefulset.kubernetes.io/pod-name="+podName)
		n := r.node(t, pod.Spec.NodeName)
		if other, dup := zones[n.zone]; dup {
			t.Errorf("pods %s and %s both run in zone %s", other, podName, n.zone)
		}
		zones[n.zone] = podName
		pvc, err := r.c.client.CoreV1().PersistentVolumeClaims(rnNamespace).Get(ctx, "data-"+podName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pv, err := r.c.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pvs = append(pvs, pv.Name)
		member := "hp-" + n.zone
		if !strings.HasPrefix(pv.Spec.CSI.VolumeHandle, "v:"+member+"/") {
			t.Errorf("%s in zone %s: volume %q, want one of member %s", podName, n.zone, pv.Spec.CSI.VolumeHandle, member)
		}
		var file string
		waitFor(t, podName+"'s file in storage/"+n.zone, 30*time.Second, func() (bool, string) {
			var err error
			file, err = fileWith(filepath.Join(r.storage, n.zone), podName)
			return err == nil, fmt.Sprint(err)
		})
		m, err := n.metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		calls := callDelta(before[n.name], m)
		if calls["NodePublishVolume "+member] != 1 || calls["NodeStageVolume "+member] != 1 {
			t.Errorf("%s on %s: node plugin calls %v, want one NodeStageVolume and one NodePublishVolume for %s", podName, n.name, calls, member)
		}
		t.Logf("%s on %s (zone %s): volume %s; file %s; node plugin calls %v", podName, n.name, n.zone, pv.Spec.CSI.VolumeHandle, file, calls)
	}
	t.Logf("%d replicas running in %s", len(r.nodes), time.Since(start).Round(time.Millisecond))

	if err := r.c.client.AppsV1().StatefulSets(rnNamespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the StatefulSet's pods gone", time.Minute, func() (bool, string) {
		pods, err := r.c.client.CoreV1().Pods(rnNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		return err == nil && len(pods.Items) == 0, fmt.Sprint(err)
	})
	for i := range len(r.nodes) {
		if err := r.c.client.CoreV1().PersistentVolumeClaims(rnNamespace).Delete(ctx, fmt.Sprintf("data-%s-%d", name, i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the group's PVs deleted", time.Minute, func() (bool, string) {
		var left []string
		for _, pv := range pvs {
			if _, err := r.c.client.CoreV1().PersistentVolumes().Get(ctx, pv, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				left = append(left, pv)
			}
		}
		return len(left) == 0, fmt.Sprint(left)
	})
}
