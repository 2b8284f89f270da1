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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestRealNodeRestart: the node plugin's container is killed (SIGKILL
// through containerd, the runtime behind kubelet's CRI, as a crash would)
// while a pod on that node has a volume published through it. kubelet
// restarts the container (restart count +1); the running pod's mount
// keeps working (its workload, reading the file every second, logs no
// failure); and a new pod on that node gets a volume staged and
// published by the restarted plugin. kubelet keeps the driver registered
// across the restart: the registration socket (the test's stand-in here,
// node-driver-registrar's container in a real node pod) did not go away.
func TestRealNodeRestart(t *testing.T) {
	r := withRealNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	first := r.rnDeploy(t, ctx, "restart-a", "rn-first-consumer", "z1")
	n := r.node(t, first.Spec.NodeName)
	if _, err := fileWith(filepath.Join(r.storage, "z1"), first.Name); err != nil {
		waitFor(t, "the first pod's file", 30*time.Second, func() (bool, string) {
			_, err := fileWith(filepath.Join(r.storage, "z1"), first.Name)
			return err == nil, fmt.Sprint(err)
		})
	}

	plugin := r.nodePluginPod(t, ctx, n.name)
	id, restarts := proxyContainer(t, plugin)
	killed := time.Now()
	if out, err := n.ctr("tasks", "kill", "-s", "SIGKILL", id); err != nil {
		t.Fatalf("ctr tasks kill %s on %s: %v: %s", id, n.name, err, out)
	}
	waitFor(t, "kubelet restarted the node plugin's container on "+n.name, 2*time.Minute, func() (bool, string) {
		p := r.nodePluginPod(t, ctx, n.name)
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == "proxy-topology" {
				return cs.RestartCount == restarts+1 && cs.State.Running != nil && strings.TrimPrefix(cs.ContainerID, "containerd://") != id, podState(p)
			}
		}
		return false, podState(p)
	})
	var calls map[string]int
	waitFor(t, "the restarted node plugin answering on "+n.name, time.Minute, func() (bool, string) {
		var err error
		calls, err = n.metrics(ctx)
		return err == nil, fmt.Sprint(err)
	})
	t.Logf("node plugin on %s restarted in %s; its calls since: %v", n.name, time.Since(killed).Round(time.Millisecond), calls)

	// The running pod: its container still runs, unrestarted, and its
	// workload read the file every second without a failure.
	time.Sleep(2 * time.Second)
	p, err := r.c.client.CoreV1().Pods(rnNamespace).Get(ctx, first.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !podRunning(p) || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("pod %s after the plugin's restart: %s", p.Name, podState(p))
	}
	logs := workloadLog(t, n, p)
	if strings.Contains(logs, "workload:") {
		t.Errorf("pod %s's workload failed to read its file:\n%s", p.Name, logs)
	}

	// A new pod on that node mounts through the restarted plugin.
	second := r.rnDeploy(t, ctx, "restart-b", "rn-first-consumer", "z1")
	if second.Spec.NodeName != n.name {
		t.Fatalf("second pod on %s, want %s", second.Spec.NodeName, n.name)
	}
	waitFor(t, "the second pod's file", 30*time.Second, func() (bool, string) {
		_, err := fileWith(filepath.Join(r.storage, "z1"), second.Name)
		return err == nil, fmt.Sprint(err)
	})
	after, err := n.metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d := callDelta(calls, after)
	if d["NodeStageVolume hp-z1"] != 1 || d["NodePublishVolume hp-z1"] != 1 {
		t.Errorf("the restarted plugin served %v for the second pod, want one NodeStageVolume and one NodePublishVolume for hp-z1", d)
	}
	t.Logf("second pod %s on %s: restarted plugin's calls %v", second.Name, n.name, d)

	for _, name := range []string{"restart-a", "restart-b"} {
		if err := r.c.client.AppsV1().Deployments(rnNamespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "both pods' volumes unmounted on "+n.name, time.Minute, func() (bool, string) {
		pods, err := r.c.client.CoreV1().Pods(rnNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app in (restart-a,restart-b)"})
		mounts, merr := n.mountinfo()
		return err == nil && len(pods.Items) == 0 && merr == nil && !strings.Contains(mounts, "kubernetes.io~csi"), fmt.Sprintf("%v %v", err, merr)
	})
	for _, name := range []string{"restart-a", "restart-b"} {
		if err := r.c.client.CoreV1().PersistentVolumeClaims(rnNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// nodePluginPod returns the chart's node pod on node.
func (r *realNodes) nodePluginPod(t *testing.T, ctx context.Context, node string) *corev1.Pod {
	t.Helper()
	pods, err := r.c.client.CoreV1().Pods(rnNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=node", FieldSelector: "spec.nodeName=" + node,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Fatalf("%d node plugin pods on %s, want 1", len(pods.Items), node)
	}
	return &pods.Items[0]
}

// proxyContainer returns the containerd ID and restart count of the
// pod's proxy-topology container.
func proxyContainer(t *testing.T, p *corev1.Pod) (string, int32) {
	t.Helper()
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == "proxy-topology" && cs.State.Running != nil {
			return strings.TrimPrefix(cs.ContainerID, "containerd://"), cs.RestartCount
		}
	}
	t.Fatalf("pod %s has no running proxy-topology container: %s", p.Name, podState(p))
	return "", 0
}

// workloadLog reads the workload container's log where kubelet keeps
// it (the node's /var/log/pods).
func workloadLog(t *testing.T, n *realNode, p *corev1.Pod) string {
	t.Helper()
	path := filepath.Join(n.dir, "logs", fmt.Sprintf("%s_%s_%s", p.Namespace, p.Name, p.UID), "workload", "0.log")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
