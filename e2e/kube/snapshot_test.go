package kube

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var volumeSnapshots = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}

// snapshotModule returns the directory of a kubernetes-csi module of
// tools/csi in the module cache (make csi-modules, a prerequisite of make
// e2e-kube, downloads it; the module must be in its CSI_MODULES).
func snapshotModule(t *testing.T, module string) string {
	t.Helper()
	version := toolsModuleVersions(t, "csi")[module]
	if version == "" {
		t.Fatalf("tools/csi/go.mod does not require %s", module)
	}
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOMODCACHE: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), module+"@"+version)
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("%v (make csi-modules downloads it)", err)
	}
	return dir
}

// applyFiles applies every object of the YAML files for real.
func (c *cluster) applyFiles(t *testing.T, paths ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range decodeObjects(t, b) {
			if _, err := c.apply(ctx, o, false); err != nil {
				t.Fatalf("%s: applying %s: %v", filepath.Base(p), key(o), err)
			}
		}
	}
}

// TestSnapshotRestore is the snapshot part of scenario 5 of issue 14:
// the snapshot CRDs and the snapshot-controller (with its RBAC) of
// external-snapshotter, as a cluster would have them, the shipped
// VolumeSnapshotClass, and the real csi-snapshotter of the controller Pod. A snapshot of a bound claim
// becomes ready through proxy-topology's CreateSnapshot, and a claim
// restored from it is bound to a new volume of the same connection with
// the same node affinity.
func TestSnapshotRestore(t *testing.T) {
	c := withControlPlane(t)
	ctx := context.Background()
	// The CRDs first, as in a cluster with snapshot support; removed when
	// the test ends, so the other tests run without them.
	client := snapshotModule(t, "github.com/kubernetes-csi/external-snapshotter/client/v8")
	crds, err := filepath.Glob(filepath.Join(client, "config", "crd", "*.storage.k8s.io_*.yaml"))
	if err != nil || len(crds) == 0 {
		t.Fatalf("no CRDs in %s: %v", client, err)
	}
	t.Cleanup(func() { c.deleteCRDs(t, crds) })
	c.applyFiles(t, crds...)
	s := startStack(t)
	ensureModesNamespace(t, c)
	snapshotter := snapshotModule(t, "github.com/kubernetes-csi/external-snapshotter/v8")
	c.applyFiles(t, filepath.Join(snapshotter, "deploy", "kubernetes", "snapshot-controller", "rbac-snapshot-controller.yaml"))
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.mapper.Reset()
		if _, err := c.dyn.Resource(volumeSnapshots).Namespace(modesNamespace).List(ctx, metav1.ListOptions{}); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the VolumeSnapshot CRD is not served after 30s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	ctrlKC := c.kubeconfig(t, c.token(t, "kube-system", "snapshot-controller"))
	ctrl := startProcess(t, "snapshot-controller", tools["SNAPSHOT_CONTROLLER"], []string{"--kubeconfig=" + ctrlKC, "--leader-election=false"}, envList(nil))
	side, _ := sidecar(t, s.run, "csi-snapshotter", "CSI_SNAPSHOTTER")

	// The shipped VolumeSnapshotClass (deploy/kubernetes/snapshot-class;
	// the chart renders the same, TestHelmClassesAndOptions).
	shipped := decodeObjects(t, run(t, tools["KUSTOMIZE"], "build", "deploy/kubernetes/snapshot-class"))
	if len(shipped) != 1 || shipped[0].GetKind() != "VolumeSnapshotClass" {
		t.Fatalf("deploy/kubernetes/snapshot-class: %d objects, want one VolumeSnapshotClass", len(shipped))
	}
	class := shipped[0]
	if d, _, _ := unstructured.NestedString(class.Object, "driver"); d != driverName {
		t.Fatalf("the shipped VolumeSnapshotClass is for driver %q", d)
	}
	if _, err := c.apply(ctx, class, false); err != nil {
		t.Fatal(err)
	}
	sc := shippedClass(t, c, "proxy-topology-anywhere")
	src := createClaim(t, c, "snap-source", sc.Name)
	src, srcPV := s.waitBound(t, src.Name)

	snap := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
		"metadata": map[string]any{"name": "snap", "namespace": modesNamespace},
		"spec": map[string]any{
			"volumeSnapshotClassName": class.GetName(),
			"source":                  map[string]any{"persistentVolumeClaimName": src.Name},
		},
	}}
	if _, err := c.apply(ctx, snap, false); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		ctrl.alive(t)
		side.alive(t)
		got, err := c.dyn.Resource(volumeSnapshots).Namespace(modesNamespace).Get(ctx, "snap", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ready, _, _ := unstructured.NestedBool(got.Object, "status", "readyToUse"); ready {
			handle, _, _ := unstructured.NestedString(got.Object, "status", "boundVolumeSnapshotContentName")
			t.Logf("snapshot ready, content %s", handle)
			break
		}
		if time.Now().After(deadline) {
			st, _, _ := unstructured.NestedMap(got.Object, "status")
			t.Fatalf("snapshot not ready after 60s: status %v\nevents:\n%s", st, s.events(t))
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Restore into a new claim.
	restore := createClaimFrom(t, c, "snap-restore", sc.Name, "snap")
	restore, pv := s.waitBound(t, restore.Name)
	if !strings.HasPrefix(pv.Spec.CSI.VolumeHandle, "v:"+sc.Parameters["connection"]+"/") || pv.Spec.CSI.VolumeHandle == srcPV.Spec.CSI.VolumeHandle {
		t.Errorf("restored PV %s: volume %s; source %s", pv.Name, pv.Spec.CSI.VolumeHandle, srcPV.Spec.CSI.VolumeHandle)
	}
	want, err := affinityTerms(srcPV)
	if err != nil {
		t.Fatal(err)
	}
	got, err := affinityTerms(pv)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("restored PV's node affinity differs from the source's (-source +restored):\n%s", diff)
	}

	// The snapshot goes first, while its source claim still exists. With
	// the claims deleted first, the snapshot-controller logs that it
	// cannot find the source claim on each update of the snapshot, and
	// once did not act on the snapshot's deletion for more than a minute.
	if err := c.dyn.Resource(volumeSnapshots).Namespace(modesNamespace).Delete(ctx, "snap", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		_, err := c.dyn.Resource(volumeSnapshots).Namespace(modesNamespace).Get(ctx, "snap", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot not deleted after 60s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// deletionPolicy Delete: the csi-snapshotter deleted the content too.
	contents := schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents"}
	for {
		list, err := c.dyn.Resource(contents).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d VolumeSnapshotContents left 60s after the snapshot's deletion", len(list.Items))
		}
		time.Sleep(200 * time.Millisecond)
	}
	claims := c.client.CoreV1().PersistentVolumeClaims(modesNamespace)
	for _, name := range []string{restore.Name, src.Name} {
		if err := claims.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	s.waitGone(t, pv.Name, s.volumeDir(t, sc.Parameters["connection"], pv))
	s.waitGone(t, srcPV.Name, s.volumeDir(t, sc.Parameters["connection"], srcPV))
}

// createClaimFrom makes a claim restored from a VolumeSnapshot.
func createClaimFrom(t *testing.T, c *cluster, name, class, snapshot string) *corev1.PersistentVolumeClaim {
	t.Helper()
	group := "snapshot.storage.k8s.io"
	pvc := claimSpec(name, class)
	pvc.Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "VolumeSnapshot", Name: snapshot}
	out, err := c.client.CoreV1().PersistentVolumeClaims(modesNamespace).Create(context.Background(), pvc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// deleteCRDs deletes the CustomResourceDefinitions of the files and waits
// until they are gone.
func (c *cluster) deleteCRDs(t *testing.T, paths []string) {
	t.Helper()
	ctx := context.Background()
	crdRes := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	var names []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Error(err)
			return
		}
		for _, o := range decodeObjects(t, b) {
			names = append(names, o.GetName())
			if err := c.dyn.Resource(crdRes).Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting CRD %s: %v", o.GetName(), err)
			}
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, name := range names {
		for {
			_, err := c.dyn.Resource(crdRes).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("CRD %s still there 60s after its deletion: %v", name, err)
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	c.mapper.Reset()
}
