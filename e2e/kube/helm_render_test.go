package kube

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// classValues uses the democratic-csi chart's class keys, two controller
// replicas, attachment, and a host directory for local-hostpath.
const classValues = `
csiDriver:
  attachRequired: true
controller:
  replicas: 2
hostPaths:
- name: shared
  path: /mnt/shared
storageClasses:
- name: nfs
  defaultClass: true
  reclaimPolicy: Retain
  volumeBindingMode: WaitForFirstConsumer
  allowVolumeExpansion: true
  parameters:
    connection: nfs-zone1
  mountOptions:
  - noatime
  - nfsvers=4
  secrets:
    provisioner-secret:
      user: admin
    node-stage-secret:
      chap: secret
    node-publish-secret: {}
volumeSnapshotClasses:
- name: nfs-snapshots
  defaultClass: true
  deletionPolicy: Retain
  parameters:
    detached: "true"
  secrets:
    snapshotter-secret:
      token: t
`

// TestHelmClassesAndOptions renders the chart with classValues and checks
// each key reached its object: the default-class annotations, the
// secrets as Secrets named by csi.storage.k8s.io/* parameters with a Role
// that lets the controller read exactly them, mountOptions and
// allowVolumeExpansion as given, the VolumeSnapshotClass only where the
// API is served, the PodDisruptionBudget, the attacher with its RBAC and
// proxy.controllerPublish, the host directory in both workloads. Every
// object but the VolumeSnapshotClass (no CRD here) passes the real API's
// dry run.
func TestHelmClassesAndOptions(t *testing.T) {
	c := deployed(t)
	path := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(path, []byte(classValues), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok := byKey(helmTemplate(t, "--values", path))["VolumeSnapshotClass/nfs-snapshots"]; ok {
		t.Error("a VolumeSnapshotClass is rendered for a cluster that does not serve snapshot.storage.k8s.io/v1")
	}
	all := helmTemplate(t, "--values", path, "--api-versions", "snapshot.storage.k8s.io/v1")
	objs := byKey(all)
	get := func(k string) *unstructured.Unstructured {
		t.Helper()
		o, ok := objs[k]
		if !ok {
			t.Fatalf("%s is not rendered; rendered: %v", k, keys(objs))
		}
		return o
	}
	sc := normalize(get("StorageClass/nfs"))
	wantSC := map[string]any{}
	if err := yaml.Unmarshal([]byte(`
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: nfs
  labels: {app.kubernetes.io/name: proxy-topology}
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: org.democratic-csi.proxy-topology
reclaimPolicy: Retain
volumeBindingMode: WaitForFirstConsumer
allowVolumeExpansion: true
mountOptions: [noatime, nfsvers=4]
parameters:
  connection: nfs-zone1
  csi.storage.k8s.io/provisioner-secret-name: nfs-provisioner-secret
  csi.storage.k8s.io/provisioner-secret-namespace: proxy-topology
  csi.storage.k8s.io/node-stage-secret-name: nfs-node-stage-secret
  csi.storage.k8s.io/node-stage-secret-namespace: proxy-topology
`), &wantSC); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantSC, sc); diff != "" {
		t.Errorf("StorageClass nfs (-want +got):\n%s", diff)
	}
	vsc := normalize(get("VolumeSnapshotClass/nfs-snapshots"))
	wantVSC := map[string]any{}
	if err := yaml.Unmarshal([]byte(`
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshotClass
metadata:
  name: nfs-snapshots
  labels: {app.kubernetes.io/name: proxy-topology}
  annotations: {snapshot.storage.kubernetes.io/is-default-class: "true"}
driver: org.democratic-csi.proxy-topology
deletionPolicy: Retain
parameters:
  detached: "true"
  csi.storage.k8s.io/snapshotter-secret-name: nfs-snapshots-snapshotter-secret
  csi.storage.k8s.io/snapshotter-secret-namespace: proxy-topology
`), &wantVSC); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantVSC, vsc); diff != "" {
		t.Errorf("VolumeSnapshotClass nfs-snapshots (-want +got):\n%s", diff)
	}
	for name, data := range map[string]map[string]any{
		"nfs-provisioner-secret":           {"user": "admin"},
		"nfs-node-stage-secret":            {"chap": "secret"},
		"nfs-snapshots-snapshotter-secret": {"token": "t"},
	} {
		got, _, _ := unstructured.NestedMap(get("Secret/"+Namespace+"/"+name).Object, "stringData")
		if diff := cmp.Diff(data, got); diff != "" {
			t.Errorf("Secret %s (-want +got):\n%s", name, diff)
		}
	}
	if _, ok := objs["Secret/"+Namespace+"/nfs-node-publish-secret"]; ok {
		t.Error("an empty secrets entry rendered a Secret")
	}
	rules, _, _ := unstructured.NestedSlice(get("Role/"+Namespace+"/proxy-topology-class-secrets").Object, "rules")
	if len(rules) != 1 {
		t.Fatalf("class-secrets Role: rules %v", rules)
	}
	names := strs(rules[0].(map[string]any)["resourceNames"])
	slices.Sort(names)
	if diff := cmp.Diff([]string{"nfs-node-stage-secret", "nfs-provisioner-secret", "nfs-snapshots-snapshotter-secret"}, names); diff != "" {
		t.Errorf("class-secrets Role resourceNames (-want +got):\n%s", diff)
	}

	pdb := get("PodDisruptionBudget/" + Namespace + "/proxy-topology-controller")
	if n, _, _ := unstructured.NestedFieldNoCopy(pdb.Object, "spec", "minAvailable"); fmt.Sprint(n) != "1" {
		t.Errorf("PodDisruptionBudget minAvailable %v", n)
	}
	if _, ok := byKey(helmTemplate(t))["PodDisruptionBudget/"+Namespace+"/proxy-topology-controller"]; ok {
		t.Error("a PodDisruptionBudget is rendered for one replica")
	}
	ctrl := get("Deployment/" + Namespace + "/proxy-topology-controller")
	att := strs(container(t, ctrl, "csi-attacher")["args"])
	for _, f := range []string{"--csi-address=/run/csi/csi.sock", "--leader-election", "--leader-election-namespace=$(NAMESPACE)"} {
		if !contains(att, f) {
			t.Errorf("csi-attacher lacks %s: %v", f, att)
		}
	}
	get("ClusterRole/proxy-topology-external-attacher")
	cfgText, _, _ := unstructured.NestedString(get("ConfigMap/"+Namespace+"/proxy-topology-config").Object, "data", "proxy.yaml")
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cfgText), &cfg); err != nil {
		t.Fatal(err)
	}
	if v, _, _ := unstructured.NestedBool(cfg, "proxy", "controllerPublish"); !v {
		t.Errorf("attachRequired without proxy.controllerPublish: true in the main config:\n%s", cfgText)
	}
	for _, w := range []string{"Deployment/" + Namespace + "/proxy-topology-controller", "DaemonSet/" + Namespace + "/proxy-topology-node"} {
		o := get(w)
		vols, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "volumes")
		found := false
		for _, v := range vols {
			if p, _, _ := unstructured.NestedString(v.(map[string]any), "hostPath", "path"); p == "/mnt/shared" {
				found = true
			}
		}
		mounts, _ := container(t, o, "proxy-topology")["volumeMounts"].([]any)
		mounted := false
		for _, m := range mounts {
			mounted = mounted || m.(map[string]any)["mountPath"] == "/mnt/shared"
		}
		if !found || !mounted {
			t.Errorf("%s: hostPaths /mnt/shared: volume %v, mounted at the same path %v", w, found, mounted)
		}
	}

	var dry []*unstructured.Unstructured
	for _, o := range all {
		switch o.GetKind() {
		case "VolumeSnapshotClass":
		case "CSIDriver":
			// attachRequired is immutable, and the deployed driver has
			// false: the dry run creates a driver of another name.
			o = o.DeepCopy()
			o.SetName("attach." + o.GetName())
			dry = append(dry, o)
		default:
			dry = append(dry, o)
		}
	}
	c.dryRunAll(t, "helm template (classes and options)", dry)

	// The chart's default VolumeSnapshotClass is the one deploy/kubernetes
	// ships beside its base.
	chart := byKey(helmTemplate(t, "--api-versions", "snapshot.storage.k8s.io/v1"))["VolumeSnapshotClass/proxy-topology-snapshots"]
	plain := decodeObjects(t, run(t, tools["KUSTOMIZE"], "build", "deploy/kubernetes/snapshot-class"))
	if chart == nil || len(plain) != 1 {
		t.Fatalf("VolumeSnapshotClass proxy-topology-snapshots: chart %v, deploy/kubernetes/snapshot-class %d objects", chart != nil, len(plain))
	}
	if diff := cmp.Diff(normalize(plain[0]), normalize(chart)); diff != "" {
		t.Errorf("VolumeSnapshotClass (-deploy/kubernetes/snapshot-class +helm):\n%s", diff)
	}
}

// TestHelmNodeLocalNeedsNoController: the chart refuses nodeLocal.enabled
// while the controller Deployment is on (its default), naming both keys:
// a central provisioner and one on every node would all act on every
// claim. With controller.enabled=false it renders (TestNodeLocalChart
// checks what).
func TestHelmNodeLocalNeedsNoController(t *testing.T) {
	need(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"controller by default", []string{"--set", "nodeLocal.enabled=true"}},
		{"controller on", []string{"--set", "nodeLocal.enabled=true", "--set", "controller.enabled=true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := command(t, tools["HELM"], append([]string{"template", "proxy-topology", "deploy/helm/proxy-topology", "--namespace", Namespace}, tc.args...)...).CombinedOutput()
			const want = "nodeLocal.enabled: true needs controller.enabled: false"
			if err == nil || !strings.Contains(string(out), want) {
				t.Errorf("helm template %v: error %v, want a failure saying %q:\n%s", tc.args, err, want, out)
			}
		})
	}
	if objs := helmTemplate(t, "--set", "nodeLocal.enabled=true", "--set", "controller.enabled=false"); len(objs) == 0 {
		t.Error("nodeLocal.enabled=true with controller.enabled=false renders nothing")
	}
}

// TestHelmNodeOptions: the values for clusters without a pod network or
// without the registrar and livenessprobe images (e2e-node installs with
// them): hostNetwork on each pod (with ClusterFirstWithHostNet), the
// registrar and the liveness-probe containers gone, and with the latter
// the proxy container's livenessProbe and healthz port, which would
// point at nothing; its readinessProbe stays. The API accepts the
// objects (dry run). The defaults keep all of them (TestHelmMatchesManifests).
func TestHelmNodeOptions(t *testing.T) {
	c := getCluster(t)
	objs := helmTemplate(t, "--set", "controller.hostNetwork=true", "--set", "node.hostNetwork=true",
		"--set", "node.driverRegistrar.enabled=false", "--set", "node.livenessProbe.enabled=false",
		"--set", "controller.livenessProbe.enabled=false")
	want := map[string][]string{
		"DaemonSet":  {"proxy-topology"},
		"Deployment": {"proxy-topology", "csi-provisioner", "csi-resizer", "csi-snapshotter"},
	}
	for _, o := range objs {
		names, ok := want[o.GetKind()]
		if !ok {
			continue
		}
		delete(want, o.GetKind())
		spec, _, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec")
		if spec["hostNetwork"] != true || spec["dnsPolicy"] != "ClusterFirstWithHostNet" {
			t.Errorf("%s: hostNetwork %v, dnsPolicy %v; want true, ClusterFirstWithHostNet", key(o), spec["hostNetwork"], spec["dnsPolicy"])
		}
		ctrs, _, _ := unstructured.NestedSlice(spec, "containers")
		var got []string
		for _, ci := range ctrs {
			ctr := ci.(map[string]any)
			got = append(got, ctr["name"].(string))
			if ctr["name"] != "proxy-topology" {
				continue
			}
			if _, has := ctr["livenessProbe"]; has {
				t.Errorf("%s: proxy-topology keeps a livenessProbe without the liveness-probe sidecar", key(o))
			}
			if _, has := ctr["readinessProbe"]; !has {
				t.Errorf("%s: proxy-topology lost its readinessProbe", key(o))
			}
			ports, _, _ := unstructured.NestedSlice(ctr, "ports")
			for _, p := range ports {
				if p.(map[string]any)["name"] == "healthz" {
					t.Errorf("%s: proxy-topology keeps the healthz port without the liveness-probe sidecar", key(o))
				}
			}
		}
		if !slices.Equal(got, names) {
			t.Errorf("%s: containers %v, want %v", key(o), got, names)
		}
	}
	if len(want) > 0 {
		t.Errorf("not rendered: %v", want)
	}
	c.ensureNamespace(t, Namespace)
	c.dryRunAll(t, "helm template with the node options", objs)
}
