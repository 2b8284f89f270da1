package kube

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// podSpec is the pod template of the rendered workload k.
func podSpec(t *testing.T, objs map[string]*unstructured.Unstructured, k string) corev1.PodSpec {
	t.Helper()
	o, ok := objs[k]
	if !ok {
		t.Fatalf("%s is not rendered; rendered: %v", k, keys(objs))
	}
	m, _, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec")
	var spec corev1.PodSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &spec); err != nil {
		t.Fatalf("%s: pod template: %v", k, err)
	}
	return spec
}

// unprivilegedProblems lists what a container that needs no privilege
// lacks of the chart's hardening (issue 38): no escalation, every
// capability dropped, a read-only root, the RuntimeDefault seccomp profile
// (pod or container level) and, when nonRoot, runAsNonRoot (pod or
// container level).
func unprivilegedProblems(pod corev1.PodSpec, c corev1.Container, nonRoot bool) []string {
	var p []string
	sc := c.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	psc := pod.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if sc.Privileged != nil && *sc.Privileged {
		p = append(p, "privileged")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		p = append(p, "allowPrivilegeEscalation not false")
	}
	if sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) > 0 {
		p = append(p, "capabilities not {drop: [ALL]}")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		p = append(p, "readOnlyRootFilesystem not true")
	}
	seccomp := psc.SeccompProfile
	if sc.SeccompProfile != nil {
		seccomp = sc.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		p = append(p, "seccompProfile not RuntimeDefault")
	}
	if nonRoot {
		runAsNonRoot := psc.RunAsNonRoot
		if sc.RunAsNonRoot != nil {
			runAsNonRoot = sc.RunAsNonRoot
		}
		uid := psc.RunAsUser
		if sc.RunAsUser != nil {
			uid = sc.RunAsUser
		}
		if runAsNonRoot == nil || !*runAsNonRoot {
			p = append(p, "runAsNonRoot not true")
		}
		if uid == nil || *uid == 0 {
			// The images' user may be root (the proxy's image is USER 0):
			// runAsNonRoot alone would stop the kubelet from starting it.
			p = append(p, "no non-zero runAsUser")
		}
	}
	return p
}

// TestHelmPodSecurityFields renders the chart with the default values and
// in node-local mode and checks every container: the controller pod's all
// run non-root and hardened; in the node DaemonSet only the proxy's
// container (mounts, Bidirectional propagation) is privileged, and the
// sidecars are hardened (as root: their sockets are in the kubelet's
// root-owned directories). With hostPaths the controller pod runs as root.
// A per-container securityContext value replaces only the keys it names.
func TestHelmPodSecurityFields(t *testing.T) {
	need(t)
	check := func(what string, objs map[string]*unstructured.Unstructured) {
		t.Helper()
		if _, ok := objs["Deployment/"+Namespace+"/proxy-topology-controller"]; ok {
			pod := podSpec(t, objs, "Deployment/"+Namespace+"/proxy-topology-controller")
			if len(pod.Containers) < 4 {
				t.Fatalf("%s: controller has %d containers", what, len(pod.Containers))
			}
			for _, c := range pod.Containers {
				if p := unprivilegedProblems(pod, c, true); len(p) > 0 {
					t.Errorf("%s: controller/%s: %s", what, c.Name, strings.Join(p, ", "))
				}
			}
		}
		pod := podSpec(t, objs, "DaemonSet/"+Namespace+"/proxy-topology-node")
		for _, c := range pod.Containers {
			if c.Name == "proxy-topology" {
				if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
					t.Errorf("%s: node/proxy-topology is not privileged: %+v", what, c.SecurityContext)
				}
				continue
			}
			if p := unprivilegedProblems(pod, c, false); len(p) > 0 {
				t.Errorf("%s: node/%s: %s", what, c.Name, strings.Join(p, ", "))
			}
		}
	}
	check("defaults", byKey(helmTemplate(t)))
	nl := byKey(helmTemplate(t, "--set", "nodeLocal.enabled=true", "--set", "controller.enabled=false"))
	check("nodeLocal", nl)
	if n := len(podSpec(t, nl, "DaemonSet/"+Namespace+"/proxy-topology-node").Containers); n < 5 {
		t.Errorf("nodeLocal: node DaemonSet has %d containers, want the node-local sidecars too", n)
	}

	// A built-in local-hostpath (hostPaths) needs root's host directory:
	// the pod runs as root, the proxy keeps owners on copies (CHOWN,
	// DAC_OVERRIDE, FOWNER), every other container stays hardened.
	hp := byKey(helmTemplate(t, "--set", "hostPaths[0].name=d", "--set", "hostPaths[0].path=/mnt/d"))
	hpod := podSpec(t, hp, "Deployment/"+Namespace+"/proxy-topology-controller")
	if u := hpod.SecurityContext.RunAsUser; u == nil || *u != 0 || hpod.SecurityContext.SeccompProfile == nil {
		t.Errorf("hostPaths: pod securityContext %+v, want runAsUser 0 with seccomp RuntimeDefault", hpod.SecurityContext)
	}
	for _, c := range hpod.Containers {
		p := unprivilegedProblems(hpod, c, false)
		want := ""
		if c.Name == "proxy-topology" {
			want = "capabilities not {drop: [ALL]}"
			if got := fmt.Sprint(c.SecurityContext.Capabilities.Add); got != "[CHOWN DAC_OVERRIDE FOWNER]" {
				t.Errorf("hostPaths: proxy capabilities add %s", got)
			}
		}
		if strings.Join(p, ", ") != want {
			t.Errorf("hostPaths: controller/%s: problems %q, want %q", c.Name, p, want)
		}
	}

	// An override replaces one key and keeps the others.
	objs := byKey(helmTemplate(t, "--set", "controller.driver.securityContext.readOnlyRootFilesystem=false",
		"--set", "controller.podSecurityContext.runAsUser=1000"))
	pod := podSpec(t, objs, "Deployment/"+Namespace+"/proxy-topology-controller")
	for _, c := range pod.Containers {
		p := unprivilegedProblems(pod, c, true)
		want := ""
		if c.Name == "proxy-topology" {
			want = "readOnlyRootFilesystem not true"
		}
		if strings.Join(p, ", ") != want {
			t.Errorf("override: controller/%s: problems %q, want %q", c.Name, p, want)
		}
	}
	if u := pod.SecurityContext.RunAsUser; u == nil || *u != 1000 || pod.SecurityContext.SeccompProfile == nil {
		t.Errorf("override: pod securityContext %+v, want runAsUser 1000 beside the defaults", pod.SecurityContext)
	}
}

// admitPod server-side dry-runs (dryRun=All: validation and admission,
// PodSecurity included, nothing stored) a Pod with spec in namespace ns.
func admitPod(c *cluster, ns, name string, spec corev1.PodSpec) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
	_, err := c.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}

// podSecurityNamespace creates namespace name enforcing Pod Security level
// with the ServiceAccounts the chart's pods name (the ServiceAccount
// admission refuses a pod whose account does not exist, and no
// controller-manager creates "default" here).
func podSecurityNamespace(t *testing.T, c *cluster, name, level string, accounts ...string) {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pod-security.kubernetes.io/enforce": level}}}
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.deleteNamespace(t, name) })
	for _, a := range accounts {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: a, Namespace: name}}
		if _, err := c.client.CoreV1().ServiceAccounts(name).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// TestPodSecurityAdmission: the real kube-apiserver's PodSecurity
// admission (on by default) admits the chart's controller pod (default
// values: driver: csi connections only) in a namespace enforcing
// `restricted`, refuses the node DaemonSet's pod there naming its
// violations (the proxy's privileged container with escalation, hostPath
// volumes), and admits it in a `privileged` namespace, as the chart's
// docs require of the release namespace. A pod-level securityContext
// override that makes the controller root is refused under `restricted`,
// so the check is not one that admits anything.
func TestPodSecurityAdmission(t *testing.T) {
	c := getCluster(t)
	objs := byKey(helmTemplate(t))
	ctrl := podSpec(t, objs, "Deployment/"+Namespace+"/proxy-topology-controller")
	node := podSpec(t, objs, "DaemonSet/"+Namespace+"/proxy-topology-node")
	accounts := []string{ctrl.ServiceAccountName, node.ServiceAccountName}
	podSecurityNamespace(t, c, "e2e-podsec-restricted", "restricted", accounts...)
	podSecurityNamespace(t, c, "e2e-podsec-privileged", "privileged", accounts...)

	before := c.warnings.count()
	if err := admitPod(c, "e2e-podsec-restricted", "controller", ctrl); err != nil {
		t.Errorf("restricted namespace refuses the controller pod: %v", err)
	}
	if w := c.warnings.since(before); len(w) > 0 {
		t.Errorf("controller pod under restricted: API warnings %q", w)
	}

	err := admitPod(c, "e2e-podsec-restricted", "node", node)
	if err == nil {
		t.Fatal("restricted namespace admits the privileged node pod")
	}
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `violates PodSecurity "restricted`) {
		t.Errorf("node pod under restricted: %v, want a PodSecurity refusal", err)
	}
	for _, v := range []string{`privileged (container "proxy-topology"`, `restricted volume type "hostPath"`, `allowPrivilegeEscalation != false (container "proxy-topology"`} {
		if !strings.Contains(err.Error(), v) {
			t.Errorf("node pod refusal does not name %q: %v", v, err)
		}
	}
	t.Logf("node pod under restricted: %v", err)
	if err := admitPod(c, "e2e-podsec-privileged", "node", node); err != nil {
		t.Errorf("privileged namespace refuses the node pod: %v", err)
	}

	root := podSpec(t, byKey(helmTemplate(t, "--set", "controller.podSecurityContext.runAsUser=0",
		"--set", "controller.podSecurityContext.runAsNonRoot=false")), "Deployment/"+Namespace+"/proxy-topology-controller")
	if err := admitPod(c, "e2e-podsec-restricted", "controller-root", root); err == nil || !strings.Contains(err.Error(), "runAsNonRoot") {
		t.Errorf("restricted namespace, controller as root: %v, want a refusal naming runAsNonRoot", err)
	}
}
