package kube

import (
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// helmOwnLabels are the labels the chart adds for Helm's bookkeeping; the
// plain manifests do not carry them. (Selectors and pod labels are
// compared as they are: they must match exactly.)
var helmOwnLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/version", "app.kubernetes.io/instance"}

// normalize rewrites an object so two renderings that mean the same
// compare equal: Helm's bookkeeping labels and the chart's checksum/*
// pod annotations (restart-on-config-change) go, embedded YAML files in a
// ConfigMap are parsed, and empty maps and lists are dropped.
func normalize(o *unstructured.Unstructured) map[string]any {
	obj := o.DeepCopy().Object
	if md, ok := obj["metadata"].(map[string]any); ok {
		if labels, ok := md["labels"].(map[string]any); ok {
			for _, l := range helmOwnLabels {
				delete(labels, l)
			}
		}
	}
	if tmpl, ok, _ := unstructured.NestedMap(obj, "spec", "template", "metadata", "annotations"); ok {
		for k := range tmpl {
			if strings.HasPrefix(k, "checksum/") {
				delete(tmpl, k)
			}
		}
		_ = unstructured.SetNestedMap(obj, tmpl, "spec", "template", "metadata", "annotations")
	}
	if o.GetKind() == "ConfigMap" {
		if data, ok, _ := unstructured.NestedMap(obj, "data"); ok {
			for k, v := range data {
				if s, ok := v.(string); ok && strings.HasSuffix(k, ".yaml") {
					var parsed any
					if err := yaml.Unmarshal([]byte(s), &parsed); err == nil {
						data[k] = parsed
					}
				}
			}
			_ = unstructured.SetNestedMap(obj, data, "data")
		}
	}
	return prune(obj).(map[string]any)
}

func prune(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range v {
			e = prune(e)
			if e == nil {
				continue
			}
			if m, ok := e.(map[string]any); ok && len(m) == 0 {
				continue
			}
			if l, ok := e.([]any); ok && len(l) == 0 {
				continue
			}
			out[k] = e
		}
		return out
	case []any:
		out := make([]any, 0, len(v))
		for _, e := range v {
			out = append(out, prune(e))
		}
		return out
	}
	return v
}

func byKey(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	m := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		m[key(o)] = o
	}
	return m
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestHelmMatchesManifests: `helm template` with the default values
// renders the same objects as deploy/kubernetes, in meaning. The
// Namespace and the connections Secret are the differences: with Helm the
// Namespace comes from `helm install --create-namespace` (and must allow
// privileged pods), and the Secret is rendered from the chart's values.
func TestHelmMatchesManifests(t *testing.T) {
	need(t)
	plain := byKey(kustomizeBuild(t))
	delete(plain, "Namespace/"+Namespace)
	chart := byKey(helmTemplate(t))
	// The chart renders the connections Secret from its values; the
	// manifests leave it to the user, so that re-applying them never
	// wipes it (TestReapplyKeepsConnections, TestHelmUpgradeKeepsConnections).
	delete(chart, "Secret/"+Namespace+"/connections")
	if diff := cmp.Diff(keys(plain), keys(chart)); diff != "" {
		t.Fatalf("objects (-deploy/kubernetes +helm):\n%s", diff)
	}
	for _, k := range keys(plain) {
		if diff := cmp.Diff(normalize(plain[k]), normalize(chart[k])); diff != "" {
			t.Errorf("%s (-deploy/kubernetes +helm):\n%s", k, diff)
		}
	}
}

// writeExtraValues writes values that set every documented extension
// point, as a user of the seed's values would.
func writeExtraValues(t *testing.T) string {
	t.Helper()
	values := `
connections:
  nfs-zone1:
    driver: csi
    csi:
      endpoint: unix:///csi/nfs/csi.sock
    proxy:
      perDriver:
        topology:
        - requirements: {zone: zone1}
  local: |
    driver: local-hostpath
    local-hostpath:
      shareBasePath: /var/lib/proxy-topology/local
controller:
  extraVolumes:
  - name: nfs-socket
    hostPath:
      path: /var/lib/kubelet/plugins/nfs.csi.example.com
      type: DirectoryOrCreate
  driver:
    extraVolumeMounts:
    - name: nfs-socket
      mountPath: /csi/nfs
  externalProvisioner:
    extraArgs:
    - --feature-gates=Topology=true
    - --strict-topology=false
    - --immediate-topology=false
node:
  extraVolumes:
  - name: nfs-socket
    hostPath:
      path: /var/lib/kubelet/plugins/nfs.csi.example.com
      type: DirectoryOrCreate
  driver:
    extraVolumeMounts:
    - name: nfs-socket
      mountPath: /csi/nfs
    extraEnv:
    - name: ZONE
      value: zone1
`
	path := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(path, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func container(t *testing.T, o *unstructured.Unstructured, name string) map[string]any {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	for _, c := range cs {
		if m := c.(map[string]any); m["name"] == name {
			return m
		}
	}
	t.Fatalf("%s has no container %s", key(o), name)
	return nil
}

func strs(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, e := range l {
		switch e := e.(type) {
		case string:
			out = append(out, e)
		case map[string]any:
			if n, ok := e["name"].(string); ok {
				out = append(out, n)
			}
		}
	}
	return out
}

// TestHelmValues checks the values the seed documents reach the objects.
func TestHelmValues(t *testing.T) {
	need(t)
	objs := byKey(helmTemplate(t, "--values", writeExtraValues(t)))

	secret := objs["Secret/"+Namespace+"/connections"]
	data, _, _ := unstructured.NestedStringMap(secret.Object, "data")
	if diff := cmp.Diff([]string{"local.yaml", "nfs-zone1.yaml"}, keys(data)); diff != "" {
		t.Errorf("Secret keys (-want +got):\n%s", diff)
	}
	for k, v := range data {
		raw, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		var parsed map[string]any
		if err := yaml.Unmarshal(raw, &parsed); err != nil || parsed["driver"] == nil {
			t.Errorf("%s is not a connection file: %v\n%s", k, err, raw)
		}
	}

	ctrl := objs["Deployment/"+Namespace+"/proxy-topology-controller"]
	vols, _, _ := unstructured.NestedSlice(ctrl.Object, "spec", "template", "spec", "volumes")
	if got := strs(vols); !contains(got, "nfs-socket") {
		t.Errorf("controller.extraVolumes: volumes %v", got)
	}
	if got := strs(container(t, ctrl, "proxy-topology")["volumeMounts"]); !contains(got, "nfs-socket") {
		t.Errorf("controller.driver.extraVolumeMounts: mounts %v", got)
	}
	if got := strs(container(t, ctrl, "csi-provisioner")["args"]); !contains(got, "--strict-topology=false") || contains(got, "--strict-topology=true") {
		t.Errorf("controller.externalProvisioner.extraArgs: args %v", got)
	}
	node := objs["DaemonSet/"+Namespace+"/proxy-topology-node"]
	if got := strs(container(t, node, "proxy-topology")["volumeMounts"]); !contains(got, "nfs-socket") {
		t.Errorf("node.driver.extraVolumeMounts: mounts %v", got)
	}
	if got := strs(container(t, node, "proxy-topology")["env"]); !contains(got, "ZONE") || !contains(got, "CSI_NODE_ID") {
		t.Errorf("node.driver.extraEnv: env %v", got)
	}

	// The Secret source and the node-label RBAC can be turned off.
	objs = byKey(helmTemplate(t, "--set", "connectionsSecret.watch=false", "--set", "rbac.nodeLabels=false"))
	for _, k := range []string{"Role/" + Namespace + "/proxy-topology-connections", "ClusterRole/proxy-topology-node-labels"} {
		if _, ok := objs[k]; ok {
			t.Errorf("%s rendered although turned off", k)
		}
	}
	if got := strs(container(t, objs["Deployment/"+Namespace+"/proxy-topology-controller"], "proxy-topology")["env"]); contains(got, "PROXY_TOPOLOGY_SET_PROXY__CONFIGSECRET") {
		t.Errorf("connectionsSecret.watch=false still sets configSecret: env %v", got)
	}

	// A connection name the proxy would refuse fails the rendering.
	cmd := exec.Command(tools["HELM"], "template", "x", "deploy/helm/proxy-topology", "--set", "connections.bad/name=x")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "not a valid connection name") {
		t.Errorf("helm template with connection bad/name: %v\n%s", err, out)
	}
}

func contains(l []string, s string) bool {
	for _, e := range l {
		if e == s {
			return true
		}
	}
	return false
}

// TestHelmLint: the chart passes `helm lint --strict`.
func TestHelmLint(t *testing.T) {
	need(t)
	run(t, tools["HELM"], "lint", "--strict", "deploy/helm/proxy-topology")
}
