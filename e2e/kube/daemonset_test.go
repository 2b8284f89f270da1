package kube

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// daemonSetPod creates in the API the Pod that the DaemonSet controller
// (not run here: it would wait for kubelets) makes for node from tmpl:
// the template, bound to the node, owned by the DaemonSet owner. It
// returns the pod prepared by podRun; the pod is deleted when the test
// ends. tmpl is owner's own template, or a rendering of another
// deployment of the same DaemonSet (deploy/node-local's).
func daemonSetPod(t *testing.T, c *cluster, owner *appsv1.DaemonSet, tmpl corev1.PodTemplateSpec, node string) *podRun {
	t.Helper()
	ctx := context.Background()
	yes := true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: owner.Name + "-" + node, Namespace: owner.Namespace, Labels: tmpl.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: owner.Name, UID: owner.UID, Controller: &yes}}},
		Spec: *tmpl.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = node
	created, err := c.client.CoreV1().Pods(owner.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the pod of DaemonSet %s/%s for node %s: %v", owner.Namespace, owner.Name, node, err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = c.client.CoreV1().Pods(owner.Namespace).Delete(context.Background(), created.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	return newPodRun(t, c, created)
}

// startNodeContainer runs the proxy-topology container of a node pod with
// the Pod's args and env, as its node plugin, and waits until it is
// ready. Its main config names the connections folder by its mount path,
// which this process sees at the volume's directory: that one path is
// moved by env (the mount, not a flag, is what the pod gives it).
func startNodeContainer(t *testing.T, r *podRun) *plugin {
	t.Helper()
	ctr := r.container(t, "proxy-topology")
	env := r.env(t, ctr)
	env["KUBECONFIG"] = r.kubecfg // in-cluster config, for a process
	for _, m := range ctr.VolumeMounts {
		if m.MountPath == "/mnt/connections" {
			env["PROXY_TOPOLOGY_SET_PROXY__CONFIGFOLDER"] = r.volumes[m.Name]
		}
	}
	return startProxyContainer(t, r, ctr, "proxy-topology "+r.pod.Spec.NodeName, env)
}

// startControllerContainer runs the proxy-topology container of a
// controller pod with the Pod's args and env (the controller reads its
// connections through the API, so no path moves) and waits until it is
// ready.
func startControllerContainer(t *testing.T, r *podRun, name string) *plugin {
	t.Helper()
	ctr := r.container(t, "proxy-topology")
	env := r.env(t, ctr)
	env["KUBECONFIG"] = r.kubecfg // in-cluster config, for a process
	return startProxyContainer(t, r, ctr, name, env)
}

// startProxyContainer runs a pod's proxy-topology container with env,
// in a mount namespace of its own when it mounts upstreams' sockets
// (inMountNamespace), and waits until it answers Probe as ready.
func startProxyContainer(t *testing.T, r *podRun, ctr *corev1.Container, name string, env map[string]string) *plugin {
	t.Helper()
	args := r.args(t, ctr)
	bin, cmdArgs := r.inMountNamespace(t, ctr, binary, args)
	proc := startProcess(t, name, bin, cmdArgs, envList(env))
	p := &plugin{name: proc.name, cmd: proc.cmd, logs: proc.logs, exited: proc.exited, endpoint: flagValue(args, "--csi-endpoint")}
	p.ready(t)
	t.Cleanup(func() { p.conn.Close() })
	return p
}

// registerDaemonSetNodes plays kubelet's part for a DaemonSet on nodes:
// each node's pod runs its node plugin, which is registered (Node labels
// and CSINode topology keys from NodeGetInfo), and the node is made
// schedulable with its labels.
func registerDaemonSetNodes(t *testing.T, c *cluster, namespace, name string, nodes map[string]map[string]string) {
	t.Helper()
	ctx := context.Background()
	ds, err := c.client.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for node, labels := range nodes {
		p := startNodeContainer(t, daemonSetPod(t, c, ds, ds.Spec.Template, node))
		if err := register(c.client, node, nodeInfo(t, p)); err != nil {
			t.Fatal(err)
		}
		if err := schedulable(ctx, c, node, labels); err != nil {
			t.Fatal(err)
		}
	}
}
