package deploy

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestPodSettings: what a cluster expects of a CSI driver's pods (issue 14's
// install defects): Linux nodes only, priority classes, resource requests
// on every container, leader election in every controller sidecar, a
// registrar with its own health endpoint and a liveness probe on it, the
// connections Secret optional (not shipped, created by the user), and a
// Namespace that Pod Security lets the privileged node plugin run in.
func TestPodSettings(t *testing.T) {
	m := load(t)
	if got := m.ns.Labels["pod-security.kubernetes.io/enforce"]; got != "privileged" {
		t.Errorf("Namespace %s: pod-security.kubernetes.io/enforce=%q, want privileged (the node plugin is privileged, with hostPath and Bidirectional propagation)", m.ns.Name, got)
	}
	for _, w := range []struct {
		name     string
		spec     corev1.PodSpec
		priority string
	}{
		{"controller", m.ctrl.Spec.Template.Spec, "system-cluster-critical"},
		{"node", m.node.Spec.Template.Spec, "system-node-critical"},
	} {
		if got := w.spec.NodeSelector["kubernetes.io/os"]; got != "linux" {
			t.Errorf("%s: nodeSelector kubernetes.io/os=%q, want linux", w.name, got)
		}
		if w.spec.PriorityClassName != w.priority {
			t.Errorf("%s: priorityClassName %q, want %s", w.name, w.spec.PriorityClassName, w.priority)
		}
		for _, c := range w.spec.Containers {
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
				t.Errorf("%s/%s: no cpu and memory requests: %v", w.name, c.Name, c.Resources.Requests)
			}
		}
		for _, v := range w.spec.Volumes {
			if v.Secret != nil && v.Secret.SecretName == m.secret && (v.Secret.Optional == nil || !*v.Secret.Optional) {
				t.Errorf("%s: the connections Secret volume is not optional: the pod would not start before the user creates it", w.name)
			}
		}
	}
	for _, c := range m.ctrl.Spec.Template.Spec.Containers {
		if strings.HasPrefix(c.Name, "csi-") && !slices.Contains(c.Args, "--leader-election") {
			t.Errorf("controller/%s: no --leader-election: %v", c.Name, c.Args)
		}
	}
	reg := container(t, m.node.Spec.Template.Spec, "node-driver-registrar")
	var endpoint string
	for _, a := range reg.Args {
		if v, ok := strings.CutPrefix(a, "--http-endpoint=:"); ok {
			endpoint = v
		}
	}
	if endpoint == "" {
		t.Fatalf("node-driver-registrar has no --http-endpoint=:<port>: %v", reg.Args)
	}
	p := reg.LivenessProbe
	if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Fatalf("node-driver-registrar: no httpGet /healthz liveness probe: %+v", p)
	}
	port := p.HTTPGet.Port
	if port.Type == intstr.String {
		for _, cp := range reg.Ports {
			if cp.Name == port.StrVal {
				port = intstr.FromInt32(cp.ContainerPort)
			}
		}
	}
	if port.String() != endpoint {
		t.Errorf("node-driver-registrar: liveness probe on port %s, --http-endpoint on %s", port.String(), endpoint)
	}
}
