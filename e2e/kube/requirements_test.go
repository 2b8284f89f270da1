package kube

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// rawTerms is a PV's node affinity in the provisioner's order (one term
// per accessible_topology entry, in the order proxy-topology returned
// them, which follows the preferred terms), each term as sorted pairs.
func rawTerms(t *testing.T, pv *corev1.PersistentVolume) []string {
	t.Helper()
	sorted, err := affinityTerms(pv) // validates the shape
	if err != nil {
		t.Fatal(err)
	}
	if sorted == nil {
		return nil
	}
	var out []string
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		labels := map[string]string{}
		for _, e := range term.MatchExpressions {
			labels[e.Key] = e.Values[0]
		}
		out = append(out, pairs(labels))
	}
	return out
}

// TestProvisionerRequirements covers with the real csi-provisioner the
// accessibility requirements the provisioner builds with
// --immediate-topology=true and --strict-topology=false, the flags the
// external-provisioner defaults to, as seen in the order of the PV's node
// affinity terms (proxy-topology orders accessible_topology by the first
// matching preferred term):
//
//   - Immediate, no allowedTopologies: one requisite term per node
//     topology, the preferred terms rotated per claim name, so
//     consecutive StatefulSet replicas (data-web-0, data-web-1) start at
//     different zones;
//   - allowedTopologies with two expressions: the values of each are
//     distributed (zone1 x region1, region2), two terms;
//   - WaitForFirstConsumer with allowedTopologies, not strict: the
//     requisite is the allowed zones, the preferred terms start at the
//     selected node's zone.
func TestProvisionerRequirements(t *testing.T) {
	s := startStack(t)
	c := s.c
	ctx := context.Background()
	ensureModesNamespace(t, c)
	s.restartProvisioner(t, "--immediate-topology=false", "--immediate-topology=true")
	s.restartProvisioner(t, "--strict-topology=true", "--strict-topology=false")

	zone := prefix + "/zone"
	region := prefix + "/region"
	conn := "requirements"
	s.setConnection(t, conn, s.base+"/"+conn, "zone1", "zone2")
	imm, wffc := storagev1.VolumeBindingImmediate, storagev1.VolumeBindingWaitForFirstConsumer
	class := func(name string, mode storagev1.VolumeBindingMode, allowed ...corev1.TopologySelectorLabelRequirement) {
		sc := &storagev1.StorageClass{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: driverName,
			VolumeBindingMode: &mode, Parameters: map[string]string{"connection": conn},
		}
		if len(allowed) > 0 {
			sc.AllowedTopologies = []corev1.TopologySelectorTerm{{MatchLabelExpressions: allowed}}
		}
		if _, err := c.client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.client.StorageV1().StorageClasses().Delete(ctx, name, metav1.DeleteOptions{}) })
	}
	class("req-immediate", imm)
	class("req-expressions", imm,
		corev1.TopologySelectorLabelRequirement{Key: zone, Values: []string{"zone1"}},
		corev1.TopologySelectorLabelRequirement{Key: region, Values: []string{"region1", "region2"}})
	class("req-first-consumer", wffc, corev1.TopologySelectorLabelRequirement{Key: zone, Values: []string{"zone1", "zone2"}})

	topo := func(z string) string {
		return pairs(map[string]string{prefix + "/cluster": "local", region: "region1", zone: z})
	}
	var pvs []*corev1.PersistentVolume
	bound := func(claim string) *corev1.PersistentVolume {
		t.Helper()
		_, pv := s.waitBound(t, claim)
		pvs = append(pvs, pv)
		return pv
	}

	// StatefulSet replicas: one term per node topology, rotated per claim.
	var first []string
	for _, name := range []string{"data-web-0", "data-web-1"} {
		createClaim(t, c, name, "req-immediate")
		got := rawTerms(t, bound(name))
		if diff := cmp.Diff([]string{topo("zone1"), topo("zone2")}, slices.Sorted(slices.Values(got))); diff != "" {
			t.Errorf("%s: node affinity terms (-want +got):\n%s", name, diff)
		}
		if len(got) > 0 {
			first = append(first, got[0])
		}
		t.Logf("%s: %v", name, got)
	}
	if len(first) == 2 && first[0] == first[1] {
		t.Errorf("data-web-0 and data-web-1 both prefer %s: the provisioner does not rotate the preferred terms per replica", first[0])
	}

	// Two expressions: values distributed.
	createClaim(t, c, "expressions", "req-expressions")
	got := rawTerms(t, bound("expressions"))
	want := []string{pairs(map[string]string{zone: "zone1", region: "region1"}), pairs(map[string]string{zone: "zone1", region: "region2"})}
	if diff := cmp.Diff(want, slices.Sorted(slices.Values(got))); diff != "" {
		t.Errorf("allowedTopologies zone1 x (region1, region2): node affinity terms (-want +got):\n%s", diff)
	}

	// Not strict, with a selected node: the allowed zones, its zone first.
	createClaim(t, c, "selected", "req-first-consumer")
	createPod(t, c, "selected", "selected", map[string]string{"kubernetes.io/hostname": "worker-zone2-a"})
	pvc, _ := s.waitBoundAndScheduled(t, "selected", "selected")
	pv, err := c.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pvs = append(pvs, pv)
	got = rawTerms(t, pv)
	want = []string{pairs(map[string]string{zone: "zone2"}), pairs(map[string]string{zone: "zone1"})}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("not strict, selected worker-zone2-a: node affinity terms in order (-want +got):\n%s", diff)
	}

	deletePod(t, c, "selected")
	for _, name := range []string{"data-web-0", "data-web-1", "expressions", "selected"} {
		if err := c.client.CoreV1().PersistentVolumeClaims(modesNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, pv := range pvs {
		s.waitGone(t, pv.Name, s.volumeDir(t, conn, pv))
	}
	if t.Failed() {
		t.Logf("events:\n%s", s.events(t))
	}
}
