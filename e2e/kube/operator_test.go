package kube

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func readObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, path))
	if err != nil {
		t.Fatal(err)
	}
	return decodeObjects(t, data)
}

// TestOperatorCSIDriverDeployment checks deploy/operator against the seed's
// requirements, has a real API server validate it through a CRD written
// from the seed, and dry-runs its pod templates wrapped the way the
// operator wraps them.
func TestOperatorCSIDriverDeployment(t *testing.T) {
	need(t)
	objs := readObjects(t, "deploy/operator/csidriverdeployment.yaml")
	if len(objs) != 1 || objs[0].GetKind() != "CSIDriverDeployment" || objs[0].GetAPIVersion() != "csidriver.storage.openshift.io/v1alpha1" {
		t.Fatalf("want one csidriver.storage.openshift.io/v1alpha1 CSIDriverDeployment, got %d objects", len(objs))
	}
	cr := objs[0]
	spec := cr.Object["spec"].(map[string]any)
	driver := readObjects(t, "deploy/kubernetes/csidriver.yaml")[0].GetName()
	for field, want := range map[string]string{"driverName": driver, "driverSocket": "/run/csi/csi.sock", "nodeUpdateStrategy": "Rolling", "managementState": "Managed"} {
		if got, _ := spec[field].(string); got != want {
			t.Errorf("spec.%s = %q, want %q", field, got, want)
		}
	}
	for tmpl, mode := range map[string]string{"driverPerNodeTemplate": "--mode=node", "driverControllerTemplate": "--mode=controller"} {
		cs, _, _ := unstructured.NestedSlice(spec, tmpl, "spec", "containers")
		if len(cs) == 0 {
			t.Errorf("spec.%s has no containers", tmpl)
			continue
		}
		first := cs[0].(map[string]any)
		args := strs(first["args"])
		if first["name"] != "proxy-topology" || !contains(args, mode) || !contains(args, "--csi-endpoint=unix:///run/csi/csi.sock") {
			t.Errorf("spec.%s: the first container must be the driver with %s on /run/csi/csi.sock; got %v %v", tmpl, mode, first["name"], args)
		}
	}

	// Mode 3 needs --strict-topology=true: the controller template carries
	// a provisioner with the flags of deploy/kubernetes' controller.
	cs, _, _ := unstructured.NestedSlice(spec, "driverControllerTemplate", "spec", "containers")
	var provArgs []string
	for _, c := range cs {
		if m := c.(map[string]any); m["name"] == "csi-provisioner" {
			provArgs = strs(m["args"])
		}
	}
	for _, f := range []string{"--csi-address=/run/csi/csi.sock", "--feature-gates=Topology=true", "--strict-topology=true", "--immediate-topology=false", "--enable-capacity", "--leader-election"} {
		if !contains(provArgs, f) {
			t.Errorf("driverControllerTemplate: the csi-provisioner lacks %s: %v", f, provArgs)
		}
	}

	// The three StorageClass modes, the same as deploy/kubernetes'.
	scts, _, _ := unstructured.NestedSlice(spec, "storageClassTemplates")
	var got []map[string]any
	for _, s := range scts {
		m := s.(map[string]any)
		name, _, _ := unstructured.NestedString(m, "metadata", "name")
		sc := map[string]any{"name": name}
		for _, f := range []string{"parameters", "reclaimPolicy", "allowVolumeExpansion", "volumeBindingMode", "allowedTopologies"} {
			if v, ok := m[f]; ok {
				sc[f] = v
			}
		}
		got = append(got, sc)
	}
	var want []map[string]any
	for _, o := range readObjects(t, "deploy/kubernetes/storageclasses.yaml") {
		sc := map[string]any{"name": o.GetName()}
		for _, f := range []string{"parameters", "reclaimPolicy", "allowVolumeExpansion", "volumeBindingMode", "allowedTopologies"} {
			if v, ok := o.Object[f]; ok {
				sc[f] = v
			}
		}
		want = append(want, sc)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("storageClassTemplates vs deploy/kubernetes/storageclasses.yaml (-want +got):\n%s", diff)
	}

	c := deployed(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	crd := readObjects(t, "e2e/kube/testdata/csidriverdeployment-crd.yaml")[0]
	if _, err := c.apply(ctx, crd, false); err != nil {
		t.Fatalf("CRD: %v", err)
	}
	crdRes := c.dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	for {
		o, err := crdRes.Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
		established := false
		for _, cd := range conds {
			m := cd.(map[string]any)
			established = established || m["type"] == "Established" && m["status"] == "True"
		}
		if established {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("CRD never established")
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.mapper.Reset()
	// The CRD's discovery takes a moment to appear.
	var err error
	for {
		if _, err = c.apply(ctx, cr, true); err == nil || ctx.Err() != nil || apierrors.IsInvalid(err) {
			break
		}
		time.Sleep(200 * time.Millisecond)
		c.mapper.Reset()
	}
	if err != nil {
		t.Fatalf("the API refuses the CSIDriverDeployment: %v", err)
	}

	// The templates as the operator runs them.
	c.dryRunAll(t, "operator templates", []*unstructured.Unstructured{
		operatorWrap(t, spec, "driverPerNodeTemplate", "DaemonSet", driver),
		operatorWrap(t, spec, "driverControllerTemplate", "Deployment", driver),
	})
}

// operatorWrap builds the workload the operator would: the template with
// the socket volume in the first container, kubelet's directory and
// registrar on nodes, provisioner in the controller.
func operatorWrap(t *testing.T, spec map[string]any, field, kind, driver string) *unstructured.Unstructured {
	t.Helper()
	tmpl, _, _ := unstructured.NestedMap(spec, field)
	labels, _, _ := unstructured.NestedStringMap(tmpl, "metadata", "labels")
	podSpec := tmpl["spec"].(map[string]any)
	containers := podSpec["containers"].([]any)
	first := containers[0].(map[string]any)
	mounts, _ := first["volumeMounts"].([]any)
	volumes, _ := podSpec["volumes"].([]any)
	// The socket directory: unless the template already shares it (the
	// controller template does, with its own provisioner).
	shared := false
	for _, m := range mounts {
		shared = shared || m.(map[string]any)["mountPath"] == "/run/csi"
	}
	if !shared {
		mounts = append(mounts, map[string]any{"name": "csi-socket", "mountPath": "/run/csi"})
	}
	if kind == "DaemonSet" {
		mounts = append(mounts, map[string]any{"name": "kubelet-dir", "mountPath": "/var/lib/kubelet", "mountPropagation": "Bidirectional"})
		volumes = append(volumes,
			map[string]any{"name": "csi-socket", "hostPath": map[string]any{"path": "/var/lib/kubelet/plugins/" + driver, "type": "DirectoryOrCreate"}},
			map[string]any{"name": "kubelet-dir", "hostPath": map[string]any{"path": "/var/lib/kubelet", "type": "Directory"}},
			map[string]any{"name": "registration-dir", "hostPath": map[string]any{"path": "/var/lib/kubelet/plugins_registry", "type": "Directory"}})
		containers = append(containers, map[string]any{
			"name": "csi-driver-registrar", "image": "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.14.0",
			"args":         []any{"--csi-address=/run/csi/csi.sock", "--kubelet-registration-path=/var/lib/kubelet/plugins/" + driver + "/csi.sock"},
			"volumeMounts": []any{map[string]any{"name": "csi-socket", "mountPath": "/run/csi"}, map[string]any{"name": "registration-dir", "mountPath": "/registration"}},
		})
	} else if !shared {
		volumes = append(volumes, map[string]any{"name": "csi-socket", "emptyDir": map[string]any{}})
		containers = append(containers, map[string]any{
			"name": "csi-provisioner", "image": "registry.k8s.io/sig-storage/csi-provisioner:v6.4.0",
			"args":         []any{"--csi-address=/run/csi/csi.sock"},
			"volumeMounts": []any{map[string]any{"name": "csi-socket", "mountPath": "/run/csi"}},
		})
	}
	first["volumeMounts"] = mounts
	containers[0] = first
	podSpec["containers"] = containers
	podSpec["volumes"] = volumes
	sel := map[string]any{}
	for k, v := range labels {
		sel[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": kind,
		"metadata": map[string]any{"name": "operator-" + labels["app.kubernetes.io/component"], "namespace": Namespace},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": sel},
			"template": tmpl,
		},
	}}
}
