package kube

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestVolumeExpansion is the expansion part of scenario 5 of issue 14: a
// claim of the shipped class proxy-topology-anywhere (allowVolumeExpansion)
// grows from 1Gi to 2Gi through kube-controller-manager's expander and
// the real csi-resizer of the controller Pod (its RBAC, its args), which
// call ControllerExpandVolume on proxy-topology. local-hostpath needs no
// node expansion, so the claim's status reaches 2Gi without a kubelet.
func TestVolumeExpansion(t *testing.T) {
	s := startStack(t)
	c := s.c
	ctx := context.Background()
	ensureModesNamespace(t, c)
	sc := shippedClass(t, c, "proxy-topology-anywhere")
	if sc.AllowVolumeExpansion == nil || !*sc.AllowVolumeExpansion {
		t.Fatalf("StorageClass %s does not allow expansion", sc.Name)
	}
	claims := c.client.CoreV1().PersistentVolumeClaims(modesNamespace)
	pvc := createClaim(t, c, "grow", sc.Name)
	pvc, _ = s.waitBound(t, pvc.Name)

	patch := []byte(`{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}`)
	if _, err := claims.Patch(ctx, pvc.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	want := resource.MustParse("2Gi")
	deadline := time.Now().Add(60 * time.Second)
	for {
		s.resizer.alive(t)
		got, err := claims.Get(ctx, pvc.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pv, err := c.client.CoreV1().PersistentVolumes().Get(ctx, got.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		size, pvSize := got.Status.Capacity[corev1.ResourceStorage], pv.Spec.Capacity[corev1.ResourceStorage]
		if size.Cmp(want) == 0 && pvSize.Cmp(want) == 0 && !resizing(got) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60s: claim %s capacity %s, conditions %v; PV capacity %s\nevents:\n%s", got.Name, size.String(), got.Status.Conditions, pvSize.String(), s.events(t))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// proxy-topology recorded the new size.
	pv, err := c.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	vol, err := csi.NewControllerClient(s.controller.conn).ControllerGetVolume(cctx, &csi.ControllerGetVolumeRequest{VolumeId: pv.Spec.CSI.VolumeHandle})
	if err != nil {
		t.Fatal(err)
	}
	if got := vol.GetVolume().GetCapacityBytes(); got != want.Value() {
		t.Errorf("ControllerGetVolume %s: capacity %d, want %d", pv.Spec.CSI.VolumeHandle, got, want.Value())
	}
	if err := claims.Delete(ctx, pvc.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitGone(t, pv.Name, s.volumeDir(t, sc.Parameters["connection"], pv))
}

// waitBound waits for an Immediate claim to be Bound and returns it with
// its PV.
func (s *stack) waitBound(t *testing.T, claim string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s.provisioner.alive(t)
		pvc, err := s.c.client.CoreV1().PersistentVolumeClaims(modesNamespace).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pvc.Status.Phase == corev1.ClaimBound {
			pv, err := s.c.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return pvc, pv
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60s: claim %s is %s\nevents:\n%s", claim, pvc.Status.Phase, s.events(t))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// resizing says whether a claim has a condition of an unfinished or
// failed resize (Resizing, FileSystemResizePending, ControllerResizeError,
// NodeResize*).
func resizing(pvc *corev1.PersistentVolumeClaim) bool {
	for _, c := range pvc.Status.Conditions {
		if strings.Contains(string(c.Type), "Resize") || c.Type == corev1.PersistentVolumeClaimResizing {
			return true
		}
	}
	return false
}
