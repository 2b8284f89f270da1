package deploy

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/democratic-csi/proxy-topology/pkg/config"
)

// loadNodeLocal builds the deploy/node-local overlay with kustomize's own
// library (what `kubectl apply -k` runs) and decodes every object it
// yields strictly, as load does the base.
func loadNodeLocal(t *testing.T) *manifests {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), "node-local")
	if err != nil {
		t.Fatalf("kustomize build deploy/node-local: %v", err)
	}
	m := newManifests()
	for _, r := range res.Resources() {
		data, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		m.addDocs(t, "node-local/"+r.CurId().String(), data)
	}
	if m.driver == nil || m.config == nil || m.node == nil || m.namespace == "" {
		t.Fatalf("deploy/node-local lacks one of Namespace, CSIDriver, ConfigMap, DaemonSet: %v", keys(m.byKind))
	}
	return m
}

// env returns the plain (not valueFrom) env of c as KEY=VALUE, and the
// fieldRef paths of the others.
func env(c corev1.Container) (plain []string, fields map[string]string) {
	fields = map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			fields[e.Name] = e.ValueFrom.FieldRef.FieldPath
		} else if e.ValueFrom == nil {
			plain = append(plain, e.Name+"="+e.Value)
		}
	}
	return plain, fields
}

// TestNodeLocalOverlay (SPEC §12, docs/kubernetes.md): deploy/node-local
// as kustomize builds it has no controller Deployment; its DaemonSet
// serves --mode=all with proxy.nodeLocal set by env, keeps the base's
// node sidecars, and runs the external-provisioner and csi-snapshotter in
// --node-deployment mode on the proxy's socket, with capacity tracking
// owned by the DaemonSet; its class is WaitForFirstConsumer.
func TestNodeLocalOverlay(t *testing.T) {
	m := loadNodeLocal(t)
	if m.ctrl != nil || len(m.byKind["Deployment"]) > 0 {
		t.Errorf("deploy/node-local keeps a Deployment: %v", m.byKind["Deployment"])
	}
	spec := m.node.Spec.Template.Spec
	proxy := spec.Containers[0]
	if proxy.Name != "proxy-topology" || !slices.Contains(proxy.Args, "--mode=all") || slices.Contains(proxy.Args, "--mode=node") {
		t.Errorf("the DaemonSet's first container must be proxy-topology --mode=all: %s %v", proxy.Name, proxy.Args)
	}
	if vm, ok := mountPath(proxy, "node-local-data"); !ok || vm.MountPath != "/var/lib/proxy-topology" {
		t.Errorf("proxy-topology: node-local-data not mounted at /var/lib/proxy-topology: %+v", proxy.VolumeMounts)
	}
	for _, v := range spec.Volumes {
		if v.Name == "node-local-data" && (v.HostPath == nil || v.HostPath.Path != "/var/lib/proxy-topology") {
			t.Errorf("node-local-data is %+v, want hostPath /var/lib/proxy-topology", v.VolumeSource)
		}
	}
	var names []string
	for _, c := range spec.Containers[1:] {
		names = append(names, c.Name)
		if !slices.Contains(c.Args, "--csi-address=/run/csi/csi.sock") {
			t.Errorf("%s: no --csi-address=/run/csi/csi.sock in %v", c.Name, c.Args)
		}
		if vm, ok := mountPath(c, "socket-dir"); !ok || vm.MountPath != "/run/csi" {
			t.Errorf("%s: socket-dir not at /run/csi", c.Name)
		}
	}
	slices.Sort(names) // kustomize's merge puts the added ones first
	if diff := cmp.Diff([]string{"csi-provisioner", "csi-snapshotter", "liveness-probe", "node-driver-registrar"}, names); diff != "" {
		t.Errorf("DaemonSet sidecars (-want +got):\n%s", diff)
	}

	prov := container(t, spec, "csi-provisioner")
	for _, f := range []string{"--node-deployment=true", "--node-deployment-immediate-binding=true", "--feature-gates=Topology=true",
		"--strict-topology=true", "--immediate-topology=false", "--enable-capacity", "--capacity-ownerref-level=1"} {
		if !slices.Contains(prov.Args, f) {
			t.Errorf("csi-provisioner lacks %s: %v", f, prov.Args)
		}
	}
	if slices.Contains(prov.Args, "--leader-election") {
		t.Error("csi-provisioner elects a leader: one per node must each serve their own node")
	}
	_, fields := env(prov)
	if diff := cmp.Diff(map[string]string{"NODE_NAME": "spec.nodeName", "NAMESPACE": "metadata.namespace", "POD_NAME": "metadata.name"}, fields); diff != "" {
		t.Errorf("csi-provisioner env from the downward API (-want +got):\n%s", diff)
	}
	snap := container(t, spec, "csi-snapshotter")
	if _, fields := env(snap); !slices.Contains(snap.Args, "--node-deployment=true") || fields["NODE_NAME"] != "spec.nodeName" {
		t.Errorf("csi-snapshotter: want --node-deployment=true and NODE_NAME from spec.nodeName: %v %v", snap.Args, fields)
	}

	var local *storagev1.StorageClass
	for _, sc := range m.classes {
		if sc.Name == "proxy-topology-node-local" {
			local = sc
		}
	}
	switch {
	case local == nil:
		t.Error("no StorageClass proxy-topology-node-local")
	case local.Provisioner != m.driver.Name || local.Parameters["connection"] != "local" ||
		local.VolumeBindingMode == nil || *local.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer:
		t.Errorf("proxy-topology-node-local: want provisioner %s, connection local, WaitForFirstConsumer: %+v", m.driver.Name, local)
	}
}

// TestNodeLocalOverlayConfig: the overlay turns proxy.nodeLocal on by the
// DaemonSet's env alone: the shared main config read with the base node's
// env has it off, with the overlay's env on.
func TestNodeLocalOverlayConfig(t *testing.T) {
	base, m := load(t), loadNodeLocal(t)
	data := []byte(m.config.Data["proxy.yaml"])
	for _, tc := range []struct {
		name string
		c    corev1.Container
		want bool
	}{
		{"deploy/kubernetes", base.node.Spec.Template.Spec.Containers[0], false},
		{"deploy/node-local", m.node.Spec.Template.Spec.Containers[0], true},
	} {
		environ, _ := env(tc.c)
		l, err := config.LoadMain("proxy.yaml", data, environ)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if l.Proxy.NodeLocal != tc.want {
			t.Errorf("%s: proxy.nodeLocal %v with env %q, want %v", tc.name, l.Proxy.NodeLocal, environ, tc.want)
		}
	}
}

// TestNodeLocalOverlayRBAC: the node plugin's ServiceAccount gets what
// its provisioner and snapshotter need — the controller's cluster roles
// for them, and in the namespace CSIStorageCapacity objects plus get on
// pods and daemonsets (the owner of --capacity-ownerref-level=1) — and
// still nothing of the connections Secret (it mounts it; the controller
// Role to read it through the API stays unbound to it).
func TestNodeLocalOverlayRBAC(t *testing.T) {
	m := loadNodeLocal(t)
	node := m.namespace + "/" + m.node.Spec.Template.Spec.ServiceAccountName
	for _, role := range []string{"ClusterRole/proxy-topology-external-provisioner", "ClusterRole/proxy-topology-external-snapshotter", "Role/proxy-topology-node-external-provisioner"} {
		if _, ok := m.roles[role]; !ok {
			t.Errorf("%s is bound but not shipped", role)
		}
		if !slices.Contains(m.bindings[role], node) {
			t.Errorf("%s is not bound to the node plugin %s: %v", role, node, m.bindings[role])
		}
	}
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csistoragecapacities"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
		{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"get"}},
	}
	if diff := cmp.Diff(want, m.roles["Role/proxy-topology-node-external-provisioner"]); diff != "" {
		t.Errorf("Role/proxy-topology-node-external-provisioner (-want +got):\n%s", diff)
	}
	if slices.Contains(m.bindings["Role/proxy-topology-connections"], node) {
		t.Error("the connections Secret Role is bound to the node plugin")
	}
}
