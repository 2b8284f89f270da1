package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// kcmControllers are the kube-controller-manager controllers the storage
// scenarios need, and no more: the PV binder and the protection
// controllers, the garbage collector, ServiceAccounts for new namespaces,
// and the Deployment and ReplicaSet controllers that turn the deployed
// controller Deployment into a Pod (the external-provisioner's capacity
// owner is found through that Pod and its ReplicaSet), and the
// attach/detach controller, which makes VolumeAttachments for drivers with
// attachRequired on nodes annotated as controller-managed (TestAttach; the
// deployed driver does not require attachment, so it never acts for the
// other tests), and the StatefulSet controller, which makes the claims
// and pods of TestGroupStatefulSet. Nothing that needs a kubelet: no node
// lifecycle (it would mark the fake nodes NotReady), no DaemonSets.
var kcmControllers = []string{
	"persistentvolume-binder-controller",
	"persistentvolume-expander-controller",
	"persistentvolume-protection-controller",
	"persistentvolumeclaim-protection-controller",
	"garbage-collector-controller",
	"serviceaccount-controller",
	"deployment-controller",
	"replicaset-controller",
	"persistentvolume-attach-detach-controller",
	"statefulset-controller",
}

// nodeControllers are added for e2e-node (realNodeSuite), whose kubelets
// run the chart's DaemonSet and mount ServiceAccount tokens with the
// kube-root-ca.crt ConfigMap.
var nodeControllers = []string{
	"daemonset-controller",
	"root-ca-certificate-publisher-controller",
}

var (
	controlPlaneOnce sync.Once
	controlPlaneErr  error
)

// withControlPlane starts kube-scheduler and kube-controller-manager
// against the shared cluster, once, as the users kubeadm gives them
// (system:kube-scheduler, and system:kube-controller-manager with one
// ServiceAccount per controller). They stop with the cluster.
func withControlPlane(t *testing.T) *cluster {
	t.Helper()
	c := deployed(t)
	c.controlPlane(t)
	return c
}

// controlPlane starts kube-scheduler and kube-controller-manager once.
func (c *cluster) controlPlane(t *testing.T) {
	t.Helper()
	controlPlaneOnce.Do(func() {
		start := time.Now()
		controlPlaneErr = c.startControlPlane()
		if controlPlaneErr == nil {
			fmt.Fprintf(os.Stderr, "e2e/kube: kube-scheduler and kube-controller-manager ready in %s\n", time.Since(start).Round(time.Millisecond))
		}
	})
	if controlPlaneErr != nil {
		t.Fatal(controlPlaneErr)
	}
}

func (c *cluster) startControlPlane() error {
	schedKC, err := c.componentKubeconfig("system:kube-scheduler")
	if err != nil {
		return err
	}
	kcmKC, err := c.componentKubeconfig("system:kube-controller-manager")
	if err != nil {
		return err
	}
	common := func(kc string) []string {
		return []string{
			"--kubeconfig=" + kc,
			// Delegated authentication and authorization of their own
			// HTTPS endpoints, which nothing here calls.
			"--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
			"--bind-address=127.0.0.1", "--secure-port=0",
			"--leader-elect=false", "--v=2",
		}
	}
	if err := c.start("kube-scheduler", tools["KUBE_SCHEDULER"], common(schedKC)...); err != nil {
		return err
	}
	controllers := kcmControllers
	if realNodeSuite {
		controllers = append(slices.Clip(controllers), nodeControllers...)
	}
	if err := c.start("kube-controller-manager", tools["KUBE_CONTROLLER_MANAGER"], append(common(kcmKC),
		"--controllers="+strings.Join(controllers, ","),
		"--use-service-account-credentials=true",
		// A test cluster: PVs are reclaimed at once, not after the
		// default sync periods.
		"--pvclaimbinder-sync-period=2s",
	)...); err != nil {
		return err
	}
	// Both are up when the controller-manager has made the "default"
	// ServiceAccount of a new namespace and the scheduler holds no lease
	// (leader election is off): wait for the first, and for the
	// scheduler's process to still be running.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "e2e-controlplane-probe"}}
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for {
		if _, err := c.client.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		}
		for _, p := range c.procs {
			select {
			case <-p.exited:
				name := filepath.Base(p.cmd.Path)
				return fmt.Errorf("%s exited (%v):\n%s", name, p.cmd.ProcessState, tail(filepath.Join(c.dir, strings.SplitN(name, "-v", 2)[0]+".log")))
			default:
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-controller-manager made no ServiceAccount in 90s:\n%s", tail(filepath.Join(c.dir, "kube-controller-manager.log")))
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

// componentKubeconfig writes a kubeconfig that authenticates with the
// client certificate of user.
func (c *cluster) componentKubeconfig(user string) (string, error) {
	pair, ok := c.pki.components[user]
	if !ok {
		return "", fmt.Errorf("no client certificate for %s", user)
	}
	path := filepath.Join(c.dir, strings.ReplaceAll(user, ":", "-")+".kubeconfig")
	return path, c.writeKubeconfig(path, &clientcmdapi.AuthInfo{ClientCertificateData: pair[0], ClientKeyData: pair[1]})
}

// schedulable makes a Node what kube-scheduler places pods on, as a
// kubelet's status updates and the node lifecycle controller would: Ready,
// with capacity and allocatable cpu, memory and pods, the OS and
// architecture labels kubelet sets, and without the not-ready taint.
func schedulable(ctx context.Context, c *cluster, name string, labels map[string]string) error {
	node, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	node.Labels["kubernetes.io/os"] = "linux"
	node.Labels["kubernetes.io/arch"] = "amd64"
	for k, v := range labels {
		node.Labels[k] = v
	}
	// The API server's TaintNodesByCondition admission taints a new Node
	// not-ready; the node lifecycle controller lifts the taint once the
	// kubelet reports Ready. That controller is not run (it would expect
	// kubelet heartbeats), so its part is done here.
	var taints []corev1.Taint
	for _, taint := range node.Spec.Taints {
		if taint.Key != corev1.TaintNodeNotReady {
			taints = append(taints, taint)
		}
	}
	node.Spec.Taints = taints
	if node, err = c.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		return err
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	now := metav1.Now()
	node.Status.Capacity, node.Status.Allocatable = res, res
	node.Status.Conditions = []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: now, LastTransitionTime: now},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: now, LastTransitionTime: now},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: now, LastTransitionTime: now},
	}
	_, err = c.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	return err
}
