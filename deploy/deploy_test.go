// Package deploy holds the Kubernetes manifests, the Helm chart and the
// operator object; this test checks the plain manifests without a cluster
// (make e2e-kube has a real API server validate all three).
package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/democratic-csi/proxy-topology/pkg/config"
)

const dir = "kubernetes"

// manifests decodes every object of deploy/kubernetes strictly: an unknown
// or duplicated field is an error, as `kubectl apply` with server-side
// field validation would make it.
type manifests struct {
	files  []string
	byKind map[string][]runtime.Object
	driver *storagev1.CSIDriver
	config *corev1.ConfigMap
	// secret is the name of the connections Secret, which the pods
	// mount but deploy/kubernetes does not ship.
	secret    string
	ns        *corev1.Namespace
	ctrl      *appsv1.Deployment
	node      *appsv1.DaemonSet
	classes   []*storagev1.StorageClass
	roles     map[string][]rbacv1.PolicyRule
	bindings  map[string][]string // role name -> subjects "ns/name"
	namespace string
}

func newManifests() *manifests {
	return &manifests{byKind: map[string][]runtime.Object{}, roles: map[string][]rbacv1.PolicyRule{}, bindings: map[string][]string{}}
}

func load(t *testing.T) *manifests {
	t.Helper()
	m := newManifests()
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range paths {
		if filepath.Base(path) == "kustomization.yaml" {
			continue
		}
		m.files = append(m.files, filepath.Base(path))
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		m.addDocs(t, path, data)
	}
	if m.driver == nil || m.config == nil || m.ctrl == nil || m.node == nil || m.namespace == "" {
		t.Fatalf("deploy/kubernetes lacks one of Namespace, CSIDriver, ConfigMap, Deployment, DaemonSet: %v", keys(m.byKind))
	}
	for _, v := range m.ctrl.Spec.Template.Spec.Volumes {
		if v.Name == "connections" && v.Secret != nil {
			m.secret = v.Secret.SecretName
		}
	}
	if m.secret == "" {
		t.Fatal("the controller mounts no connections Secret")
	}
	return m
}

// addDocs decodes every object of the YAML stream data (from where)
// strictly and files it by kind.
func (m *manifests) addDocs(t *testing.T, where string, data []byte) {
	t.Helper()
	decoder := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	r := utilyaml.NewYAMLReader(bufioReader(data))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, gvk, err := decoder.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		m.byKind[gvk.Kind] = append(m.byKind[gvk.Kind], obj)
		switch o := obj.(type) {
		case *storagev1.CSIDriver:
			m.driver = o
		case *corev1.ConfigMap:
			m.config = o
		case *corev1.Secret:
			t.Fatalf("%s: ships Secret %s: re-applying the manifests would overwrite the user's", where, o.Name)
		case *appsv1.Deployment:
			m.ctrl = o
		case *appsv1.DaemonSet:
			m.node = o
		case *storagev1.StorageClass:
			m.classes = append(m.classes, o)
		case *corev1.Namespace:
			m.namespace, m.ns = o.Name, o
		case *rbacv1.ClusterRole:
			m.roles["ClusterRole/"+o.Name] = o.Rules
		case *rbacv1.Role:
			m.roles["Role/"+o.Name] = o.Rules
		case *rbacv1.ClusterRoleBinding:
			m.bindings["ClusterRole/"+o.RoleRef.Name] = append(m.bindings["ClusterRole/"+o.RoleRef.Name], subjects(o.Subjects)...)
		case *rbacv1.RoleBinding:
			m.bindings[o.RoleRef.Kind+"/"+o.RoleRef.Name] = append(m.bindings[o.RoleRef.Kind+"/"+o.RoleRef.Name], subjects(o.Subjects)...)
		}
	}
}

func subjects(ss []rbacv1.Subject) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Namespace+"/"+s.Name)
	}
	return out
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// TestKustomizationListsEveryFile: a manifest left out of
// kustomization.yaml would never be applied.
func TestKustomizationListsEveryFile(t *testing.T) {
	m := load(t)
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Namespace string   `json:"namespace"`
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	res := slices.Clone(k.Resources)
	sort.Strings(res)
	if diff := cmp.Diff(m.files, res); diff != "" {
		t.Errorf("kustomization resources (-files +listed):\n%s", diff)
	}
	if k.Namespace != m.namespace {
		t.Errorf("kustomization namespace %q, Namespace object %q", k.Namespace, m.namespace)
	}
}

func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

func mountPath(c corev1.Container, volume string) (corev1.VolumeMount, bool) {
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return m, true
		}
	}
	return corev1.VolumeMount{}, false
}

// TestSocketAndSidecars: the seed operator's rules (driver first, socket in
// an otherwise empty directory, the same path in controller and node) and
// the sidecars SPEC §2 and §9 need, with the flags they need.
func TestSocketAndSidecars(t *testing.T) {
	m := load(t)
	for _, w := range []struct {
		name     string
		spec     corev1.PodSpec
		mode     string
		sidecars []string
	}{
		{"controller", m.ctrl.Spec.Template.Spec, "--mode=controller", []string{"csi-provisioner", "csi-resizer", "csi-snapshotter", "liveness-probe"}},
		{"node", m.node.Spec.Template.Spec, "--mode=node", []string{"node-driver-registrar", "liveness-probe"}},
	} {
		first := w.spec.Containers[0]
		if first.Name != "proxy-topology" || !slices.Contains(first.Args, w.mode) || !slices.Contains(first.Args, "--csi-endpoint=unix:///run/csi/csi.sock") {
			t.Errorf("%s: the first container must be proxy-topology %s on unix:///run/csi/csi.sock: %s %v", w.name, w.mode, first.Name, first.Args)
		}
		var names []string
		for _, c := range w.spec.Containers[1:] {
			names = append(names, c.Name)
			if !slices.Contains(c.Args, "--csi-address=/run/csi/csi.sock") {
				t.Errorf("%s/%s: no --csi-address=/run/csi/csi.sock in %v", w.name, c.Name, c.Args)
			}
		}
		if diff := cmp.Diff(w.sidecars, names); diff != "" {
			t.Errorf("%s sidecars (-want +got):\n%s", w.name, diff)
		}
		for _, c := range w.spec.Containers {
			if vm, ok := mountPath(c, "socket-dir"); !ok || vm.MountPath != "/run/csi" {
				t.Errorf("%s/%s: socket-dir not at /run/csi", w.name, c.Name)
			}
		}
		// The socket directory holds nothing else: no other volume is
		// mounted at or below it.
		for _, c := range w.spec.Containers {
			for _, vm := range c.VolumeMounts {
				if vm.Name != "socket-dir" && strings.HasPrefix(vm.MountPath+"/", "/run/csi/") {
					t.Errorf("%s/%s: %s mounted inside the socket directory", w.name, c.Name, vm.Name)
				}
			}
		}
		if vm, ok := mountPath(first, "connections"); !ok || vm.MountPath != "/mnt/connections" {
			t.Errorf("%s: the connections Secret is not mounted at /mnt/connections", w.name)
		}
	}

	prov := container(t, m.ctrl.Spec.Template.Spec, "csi-provisioner")
	for _, f := range []string{"--feature-gates=Topology=true", "--strict-topology=true", "--immediate-topology=false", "--enable-capacity", "--capacity-ownerref-level=2", "--leader-election"} {
		if !slices.Contains(prov.Args, f) {
			t.Errorf("csi-provisioner lacks %s: %v", f, prov.Args)
		}
	}
	envs := map[string]string{}
	for _, e := range prov.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			envs[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	// --enable-capacity finds its owner through these.
	if envs["NAMESPACE"] != "metadata.namespace" || envs["POD_NAME"] != "metadata.name" {
		t.Errorf("csi-provisioner env NAMESPACE/POD_NAME from the downward API: %v", envs)
	}

	spec := m.node.Spec.Template.Spec
	node := spec.Containers[0]
	if node.SecurityContext == nil || node.SecurityContext.Privileged == nil || !*node.SecurityContext.Privileged {
		t.Error("node plugin not privileged")
	}
	if vm, ok := mountPath(node, "kubelet-dir"); !ok || vm.MountPath != "/var/lib/kubelet" || vm.MountPropagation == nil || *vm.MountPropagation != corev1.MountPropagationBidirectional {
		t.Errorf("node plugin: /var/lib/kubelet not mounted with Bidirectional propagation: %+v", vm)
	}
	var nodeID string
	for _, e := range node.Env {
		if e.Name == "CSI_NODE_ID" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			nodeID = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if nodeID != "spec.nodeName" {
		t.Errorf("CSI_NODE_ID from %q, want spec.nodeName", nodeID)
	}
	pluginDir := "/var/lib/kubelet/plugins/" + m.driver.Name + "/"
	for _, v := range spec.Volumes {
		if v.Name == "socket-dir" && (v.HostPath == nil || v.HostPath.Path != pluginDir) {
			t.Errorf("node socket-dir is %+v, want hostPath %s", v.VolumeSource, pluginDir)
		}
	}
	reg := container(t, spec, "node-driver-registrar")
	if !slices.Contains(reg.Args, "--kubelet-registration-path="+pluginDir+"csi.sock") {
		t.Errorf("registrar registers %v, want %scsi.sock", reg.Args, pluginDir)
	}
	if m.ctrl.Spec.Template.Spec.ServiceAccountName == spec.ServiceAccountName {
		t.Error("controller and node share a ServiceAccount: the node plugin would get the controller's Secret access")
	}
}

// TestConfigLoads: the shipped main config passes proxy-topology's own
// loader, as the node plugins see it and as the controller sees it with
// its env overrides.
func TestConfigLoads(t *testing.T) {
	m := load(t)
	data := []byte(m.config.Data["proxy.yaml"])
	l, err := config.LoadMain("proxy.yaml", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Warnings) > 0 {
		t.Errorf("warnings: %q", l.Warnings)
	}
	if l.CSIName != m.driver.Name {
		t.Errorf("csiName %q, CSIDriver %q", l.CSIName, m.driver.Name)
	}
	for _, sc := range m.classes {
		if sc.Provisioner != m.driver.Name {
			t.Errorf("StorageClass %s: provisioner %q, CSIDriver %q", sc.Name, sc.Provisioner, m.driver.Name)
		}
	}
	needsLabels := l.Topology.NeedsLabels()
	_, hasNodeRBAC := m.roles["ClusterRole/proxy-topology-node-labels"]
	if needsLabels != hasNodeRBAC {
		t.Errorf("config reads node labels: %v; node-labels RBAC shipped: %v", needsLabels, hasNodeRBAC)
	}

	// The controller: env as kubelet expands it.
	vars := map[string]string{}
	var environ []string
	for _, e := range container(t, m.ctrl.Spec.Template.Spec, "proxy-topology").Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace" {
			v = m.namespace
		}
		for k, val := range vars {
			v = strings.ReplaceAll(v, "$("+k+")", val)
		}
		vars[e.Name] = v
		environ = append(environ, e.Name+"="+v)
	}
	l, err = config.LoadMain("proxy.yaml", data, environ)
	if err != nil {
		t.Fatalf("controller config: %v", err)
	}
	if want := m.namespace + "/" + m.secret; l.Proxy.ConfigSecret != want || l.Proxy.ConfigFolder != "" {
		t.Errorf("controller reads connections from secret %q / folder %q, want secret %q", l.Proxy.ConfigSecret, l.Proxy.ConfigFolder, want)
	}
}

// TestRBACScope: the proxy's own permissions are exactly what it uses.
func TestRBACScope(t *testing.T) {
	m := load(t)
	want := map[string][]rbacv1.PolicyRule{
		"ClusterRole/proxy-topology-node-labels": {{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}}},
		"Role/proxy-topology-connections":        {{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{m.secret}, Verbs: []string{"get", "list", "watch"}}},
	}
	for role, rules := range want {
		if diff := cmp.Diff(rules, m.roles[role]); diff != "" {
			t.Errorf("%s (-want +got):\n%s", role, diff)
		}
	}
	node := m.namespace + "/" + m.node.Spec.Template.Spec.ServiceAccountName
	ctrl := m.namespace + "/" + m.ctrl.Spec.Template.Spec.ServiceAccountName
	if diff := cmp.Diff([]string{node}, m.bindings["ClusterRole/proxy-topology-node-labels"]); diff != "" {
		t.Errorf("node-labels bound to (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{ctrl}, m.bindings["Role/proxy-topology-connections"]); diff != "" {
		t.Errorf("connections Role bound to (-want +got):\n%s", diff)
	}
	// Nothing else is bound to the node plugin.
	for role, subjects := range m.bindings {
		if slices.Contains(subjects, node) && role != "ClusterRole/proxy-topology-node-labels" {
			t.Errorf("%s is bound to the node plugin's ServiceAccount", role)
		}
	}
}

// TestStorageClassModes: one class per mode of SPEC §9, naming
// connections that exist in examples/connections.
func TestStorageClassModes(t *testing.T) {
	m := load(t)
	l, err := config.LoadMain("proxy.yaml", []byte(m.config.Data["proxy.yaml"]), nil)
	if err != nil {
		t.Fatal(err)
	}
	modes := map[string]string{}
	for _, sc := range m.classes {
		mode := "?"
		switch {
		case sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer && len(sc.AllowedTopologies) == 0:
			mode = "3 first consumer"
		case len(sc.AllowedTopologies) > 0:
			mode = "2 allowedTopologies"
			for _, term := range sc.AllowedTopologies {
				for _, e := range term.MatchLabelExpressions {
					if !strings.HasPrefix(e.Key, l.Topology.Prefix()+"/") {
						t.Errorf("%s: allowedTopologies key %s is not under the prefix %s", sc.Name, e.Key, l.Topology.Prefix())
					}
				}
			}
		case sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingImmediate:
			mode = "1 no requirements"
		}
		modes[mode] = sc.Name
		conn := sc.Parameters["connection"]
		if _, err := os.Stat(filepath.Join("..", "examples", "connections", conn+".yaml")); err != nil {
			t.Errorf("%s: connection %q is not in examples/connections: %v", sc.Name, conn, err)
		}
	}
	if diff := cmp.Diff([]string{"1 no requirements", "2 allowedTopologies", "3 first consumer"}, keys(modes)); diff != "" {
		t.Errorf("modes (-want +got):\n%s", diff)
	}
	if m.driver.Spec.StorageCapacity == nil || !*m.driver.Spec.StorageCapacity || m.driver.Spec.AttachRequired == nil || *m.driver.Spec.AttachRequired {
		t.Error("CSIDriver: want storageCapacity: true, attachRequired: false")
	}
}

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }
