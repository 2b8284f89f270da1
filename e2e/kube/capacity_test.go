package kube

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const gi = int64(1) << 30

// zoneTopology is how the provisioner names the node topology of a zone
// in a CSIStorageCapacity (the segments every node of that zone reports),
// as waitCapacity returns it.
func zoneTopology(zone string) string {
	return pairs(map[string]string{prefix + "/cluster": "local", prefix + "/region": "region1", prefix + "/zone": zone})
}

// firstConsumerClass creates a WaitForFirstConsumer StorageClass of
// connection conn, deleted when the test ends.
func (s *stack) firstConsumerClass(t *testing.T, name, conn string) string {
	t.Helper()
	ctx := context.Background()
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: name},
		Provisioner:       driverName,
		VolumeBindingMode: &wffc,
		Parameters:        map[string]string{"connection": conn},
	}
	if _, err := s.c.client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.c.client.StorageV1().StorageClasses().Delete(ctx, name, metav1.DeleteOptions{}) })
	return name
}

// waitCapacityExactly waits until the provisioner has published, for
// class, exactly the given capacity (bytes) in each zone of want.
func (s *stack) waitCapacityExactly(t *testing.T, class string, want map[string]int64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := s.waitCapacity(t, class, len(want))
		var off []string
		for zone, bytes := range want {
			q, ok := got[zoneTopology(zone)]
			if !ok || q.Value() != bytes {
				off = append(off, fmt.Sprintf("%s: %s (published %v), want %d", zone, q.String(), ok, bytes))
			}
		}
		if len(off) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("class %s: published capacity after 60s: %s", class, strings.Join(off, "; "))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// createSizedClaim makes a ReadWriteOnce claim of class asking for bytes.
func createSizedClaim(t *testing.T, c *cluster, name, class string, bytes int64) {
	t.Helper()
	pvc := claimSpec(name, class)
	pvc.Spec.Resources.Requests[corev1.ResourceStorage] = *resource.NewQuantity(bytes, resource.BinarySI)
	if _, err := c.client.CoreV1().PersistentVolumeClaims(modesNamespace).Create(context.Background(), pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// schedulingMessage waits until kube-scheduler reports the pod
// unschedulable and returns its message; a pod that gets a node fails the
// test.
func (s *stack) schedulingMessage(t *testing.T, pod string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		p, err := s.c.client.CoreV1().Pods(modesNamespace).Get(context.Background(), pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != "" {
			t.Fatalf("pod %s was scheduled onto %s", pod, p.Spec.NodeName)
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				return cond.Message
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s: no unschedulable condition after 60s: %v", pod, p.Status.Conditions)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestCapacityTracking is scenario 4 of issue 14: the real csi-provisioner,
// with the capacity flags of the deployed controller Pod, publishes one
// CSIStorageCapacity per node topology from proxy-topology's GetCapacity,
// and kube-scheduler places WaitForFirstConsumer pods by it. The
// connection forwards to an upstream reporting 3Gi and serves zone1 only:
// the published capacity is exactly 3Gi in zone1 and 0 in zone2. A 5Gi
// claim fits no zone: its pod is unschedulable for lack of storage and the
// upstream is never asked for a volume. 1Gi claims with pods free to move
// all land in zone1, without the scheduler ever trying zone2 (no
// RESOURCE_EXHAUSTED from the provisioner). Then two zones that both have
// capacity, 1Gi and 10Gi (a group whose members report those): a 5Gi
// claim lands in the zone where it fits.
func TestCapacityTracking(t *testing.T) {
	s := startStack(t)
	c := s.c
	ctx := context.Background()
	ensureModesNamespace(t, c)
	// Every connection here is added to the Secret while the controller
	// runs (that this needs no restart is TestConnectionsFromSecret's).
	up := startFakeUpstream(t, 3*gi, false)
	conn := "capacity-zone1"
	s.setConnectionText(t, conn, up.connectionText("zone1"))
	class := s.firstConsumerClass(t, conn, conn)
	s.waitCapacityExactly(t, class, map[string]int64{"zone1": 3 * gi, "zone2": 0})

	createSizedClaim(t, c, "cap-big", class, 5*gi)
	createPod(t, c, "cap-big", "cap-big", nil)
	msg := s.schedulingMessage(t, "cap-big")
	if !strings.Contains(msg, "did not have enough free storage") {
		t.Errorf("pod cap-big is unschedulable, but not for storage capacity: %s", msg)
	}
	t.Logf("5Gi claim: %s", msg)

	small := []string{"cap-small-0", "cap-small-1", "cap-small-2"}
	for _, name := range small {
		createSizedClaim(t, c, name, class, gi)
		createPod(t, c, name, name, nil)
	}
	var pvs []*corev1.PersistentVolume
	for _, name := range small {
		pvc, pod := s.waitBoundAndScheduled(t, name, name)
		if pod.Spec.NodeName != "worker-zone1-a" {
			t.Errorf("pod %s is on %s, want worker-zone1-a (the only zone1 node)", name, pod.Spec.NodeName)
		}
		if node := pvc.Annotations[annSelectedNode]; node != "worker-zone1-a" {
			t.Errorf("claim %s: selected node %q", name, node)
		}
		if m := s.provisioningFailed(t, name); m != "" {
			t.Errorf("claim %s: the provisioner failed once: %s (the scheduler should not have tried a zone without capacity)", name, m)
		}
		pv, err := c.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pvs = append(pvs, pv)
	}
	if n := up.Creates(); n != len(small) {
		t.Errorf("the upstream made %d volumes, want %d (none for the 5Gi claim)", n, len(small))
	}
	if p, err := c.client.CoreV1().PersistentVolumeClaims(modesNamespace).Get(ctx, "cap-big", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if node := p.Annotations[annSelectedNode]; node != "" || p.Status.Phase != corev1.ClaimPending {
		t.Errorf("claim cap-big: %s, selected node %q; it fits no zone", p.Status.Phase, node)
	}

	// Two zones, both with capacity but not the same: a group (SPEC §11)
	// whose member in zone1 reports 1Gi and in zone2 10Gi, so the
	// provisioner publishes 1Gi and 10Gi. A 5Gi claim is bigger than
	// zone1's capacity: its pod lands in zone2, and only the zone2 member
	// makes a volume.
	small1, big2 := startFakeUpstream(t, gi, false), startFakeUpstream(t, 10*gi, false)
	s.setConnectionText(t, "capacity-m1", small1.connectionText("zone1"))
	s.setConnectionText(t, "capacity-m2", big2.connectionText("zone2"))
	s.setConnectionText(t, "capacity-group", "driver: group\ngroup:\n  members: [capacity-m1, capacity-m2]\n")
	grp := s.firstConsumerClass(t, "capacity-group", "capacity-group")
	s.waitCapacityExactly(t, grp, map[string]int64{"zone1": gi, "zone2": 10 * gi})
	createSizedClaim(t, c, "cap-zone2", grp, 5*gi)
	createPod(t, c, "cap-zone2", "cap-zone2", nil)
	pvc, pod := s.waitBoundAndScheduled(t, "cap-zone2", "cap-zone2")
	if !strings.HasPrefix(pod.Spec.NodeName, "worker-zone2-") {
		t.Errorf("the 5Gi claim's pod is on %s; zone1 has 1Gi, so it belongs in zone2", pod.Spec.NodeName)
	}
	if m := s.provisioningFailed(t, "cap-zone2"); m != "" {
		t.Errorf("claim cap-zone2: the provisioner failed once: %s", m)
	}
	if small1.Creates() != 0 || big2.Creates() != 1 {
		t.Errorf("volumes made: zone1 member %d, zone2 member %d; want 0 and 1", small1.Creates(), big2.Creates())
	}
	pv, err := c.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pvs = append(pvs, pv)
	t.Logf("5Gi claim with 1Gi in zone1, 10Gi in zone2: pod on %s", pod.Spec.NodeName)

	select {
	case <-s.controller.exited:
		t.Fatalf("the controller exited: %v", s.controller.cmd.ProcessState)
	default:
	}

	for _, name := range append(small, "cap-big", "cap-zone2") {
		deletePod(t, c, name)
		if err := c.client.CoreV1().PersistentVolumeClaims(modesNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, pv := range pvs {
		s.waitPVGone(t, pv.Name)
	}
	if n := up.Volumes(); n != 0 {
		t.Errorf("%d volumes left on the upstream after the claims were deleted", n)
	}
}

// waitPVGone waits for a PV to be deleted.
func (s *stack) waitPVGone(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := s.c.client.CoreV1().PersistentVolumes().Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("PV %s still there after 60s\nevents:\n%s", name, s.events(t))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
