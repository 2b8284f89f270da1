package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

const annSelectedNode = "volume.kubernetes.io/selected-node"

// TestUnservedZone is scenario 2 of issue 14: a strict WaitForFirstConsumer
// claim whose pod is pinned to a node in a zone the connection does not
// serve. Capacity tracking normally keeps kube-scheduler away from that
// node (proxy-topology reports capacity 0 there); the scheduler picks it
// only when the published capacity is stale, here because the connection
// was narrowed to zone1 after the provisioner published capacity for
// zone1 and zone2 (it polls once a minute). Then CreateVolume fails with
// RESOURCE_EXHAUSTED, the real provisioner hands the claim back (drops
// the selected node), creates nothing and refreshes the class's capacity,
// after which the scheduler leaves the pinned pod Pending. The same claim
// with a pod free to move then lands in zone1.
//
// The scheduler acts within a second of the narrowing; only a periodic
// poll landing in that second makes it see fresh capacity first. Then
// (no RESOURCE_EXHAUSTED, the pod unschedulable) the test starts again
// with a new class.
func TestUnservedZone(t *testing.T) {
	s := startStack(t)
	c := s.c
	ensureModesNamespace(t, c)
	zone := prefix + "/zone"
	for attempt := 1; attempt <= 3; attempt++ {
		name := fmt.Sprintf("late-%d", attempt)
		claim, won := s.pinnedToUnservedZone(t, name)
		if !won {
			t.Logf("attempt %d: the provisioner refreshed capacity before the scheduler picked zone2; again", attempt)
			continue
		}
		// Hand the claim to a pod that may go anywhere.
		deletePod(t, c, "pinned-"+name)
		pod := createPod(t, c, "free-"+name, claim, nil)
		pvc, p := s.waitBoundAndScheduled(t, claim, pod.Name)
		pv, err := c.client.CoreV1().PersistentVolumes().Get(context.Background(), pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := affinityTerms(pv)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{pairs(map[string]string{prefix + "/cluster": "local", prefix + "/region": "region1", zone: "zone1"})}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("PV %s node affinity (-want +got):\n%s", pv.Name, diff)
		}
		if p.Spec.NodeName != "worker-zone1-a" {
			t.Errorf("the free pod is on %s, want worker-zone1-a (the only zone1 node)", p.Spec.NodeName)
		}
		deletePod(t, c, p.Name)
		if err := c.client.CoreV1().PersistentVolumeClaims(modesNamespace).Delete(context.Background(), claim, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		s.waitGone(t, pv.Name, s.volumeDir(t, "e2e-"+name, pv))
		return
	}
	t.Fatal("the scheduler never picked the unserved zone in 3 attempts: the published capacity was always fresh")
}

// pinnedToUnservedZone runs one attempt: connection e2e-<name> serves
// zone1 and zone2 while class e2e-<name> gets its capacity, then only
// zone1; a claim's pod is pinned to worker-zone2-a. It returns the claim
// and whether the scheduler picked the node (won) and everything SPEC §9
// says then held.
func (s *stack) pinnedToUnservedZone(t *testing.T, name string) (string, bool) {
	t.Helper()
	c := s.c
	ctx := context.Background()
	conn := "e2e-" + name
	base := filepath.Join(s.base, conn)
	s.setConnection(t, conn, base, "zone1", "zone2")
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: conn},
		Provisioner:       driverName,
		VolumeBindingMode: &wffc,
		Parameters:        map[string]string{"connection": conn},
	}
	if _, err := c.client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.client.StorageV1().StorageClasses().Delete(ctx, conn, metav1.DeleteOptions{}) })
	zone2 := pairs(map[string]string{prefix + "/cluster": "local", prefix + "/region": "region1", prefix + "/zone": "zone2"})
	for deadline := time.Now().Add(30 * time.Second); ; {
		caps := s.waitCapacity(t, conn, 2)
		if q, ok := caps[zone2]; ok && q.Sign() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("class %s: no capacity published for zone2 while its connection serves zone2: %v", conn, caps)
		}
		time.Sleep(250 * time.Millisecond)
	}

	// Narrowed; wait until the controller serves the new file.
	s.setConnection(t, conn, base, "zone1")
	deadline := time.Now().Add(10 * time.Second)
	for s.capacity(t, conn, "zone2") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("connection %s still serves zone2 10s after the Secret changed", conn)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Every change of the claim, in order: the scheduler's selection and
	// the provisioner's hand-back can follow each other within
	// milliseconds, too fast to poll.
	claims := c.client.CoreV1().PersistentVolumeClaims(modesNamespace)
	byName := metav1.ListOptions{FieldSelector: "metadata.name=" + name}
	list, err := claims.List(ctx, byName)
	if err != nil {
		t.Fatal(err)
	}
	// A RetryWatcher resumes after the API's transient watch errors.
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = byName.FieldSelector
			return claims.Watch(ctx, o)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	claim := createClaim(t, c, name, conn).Name
	pinned := createPod(t, c, "pinned-"+name, claim, map[string]string{"kubernetes.io/hostname": "worker-zone2-a"})
	var selected, handedBack bool
	exhausted := ""
	deadline = time.Now().Add(90 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !selected || !handedBack || exhausted == "" {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch of the claim ended")
			}
			pvc, ok := ev.Object.(*corev1.PersistentVolumeClaim)
			if !ok {
				t.Fatalf("watch of claim %s: %v", claim, ev.Object)
			}
			switch node := pvc.Annotations[annSelectedNode]; {
			case node == "worker-zone2-a":
				selected = true
			case node != "":
				t.Fatalf("claim %s: selected node %s; its pod is pinned to worker-zone2-a", claim, node)
			case selected:
				handedBack = true
			}
			if pvc.Status.Phase != corev1.ClaimPending || pvc.Spec.VolumeName != "" {
				t.Fatalf("claim %s is %s (volume %q): a volume was made although the pod is pinned to zone2", claim, pvc.Status.Phase, pvc.Spec.VolumeName)
			}
			continue
		case <-tick.C:
		}
		s.provisioner.alive(t)
		if time.Now().After(deadline) {
			t.Fatalf("after 90s: selected %v, handed back %v, RESOURCE_EXHAUSTED %q\nevents:\n%s", selected, handedBack, exhausted, s.events(t))
		}
		if exhausted == "" {
			exhausted = s.provisioningFailed(t, claim, "ResourceExhausted", conn)
		}
		// Lost: the scheduler found zone2 without capacity before it
		// ever picked it.
		if !selected && exhausted == "" && s.unschedulable(t, pinned.Name) {
			if q, ok := s.waitCapacity(t, conn, 2)[zone2]; ok && q.Sign() == 0 {
				deletePod(t, c, pinned.Name)
				_ = c.client.CoreV1().PersistentVolumeClaims(modesNamespace).Delete(ctx, claim, metav1.DeleteOptions{})
				return claim, false
			}
		}
	}
	// The provisioner refreshes the class's capacity after a failed
	// CreateVolume: zone2 now has none, and the scheduler leaves the pinned
	// pod Pending.
	for {
		q := s.waitCapacity(t, conn, 2)[zone2]
		if q.Sign() == 0 && s.unschedulable(t, pinned.Name) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after RESOURCE_EXHAUSTED: capacity %s published for zone2, pod %s unschedulable %v\nevents:\n%s", q.String(), pinned.Name, s.unschedulable(t, pinned.Name), s.events(t))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Nothing was created: no PV names the claim, the connection's
	// volumes directory is empty.
	pvs, err := c.client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pv := range pvs.Items {
		if ref := pv.Spec.ClaimRef; ref != nil && ref.Namespace == modesNamespace && ref.Name == claim {
			t.Errorf("PV %s was made for claim %s", pv.Name, claim)
		}
	}
	if entries, err := os.ReadDir(filepath.Join(base, "volumes")); err == nil && len(entries) > 0 {
		t.Errorf("connection %s made volumes: %v", conn, entries)
	}
	t.Logf("claim %s: selected worker-zone2-a, handed back; the provisioner reported: %s", claim, exhausted)
	return claim, true
}

// setConnection writes connection conn, local-hostpath under base serving
// the given zones, into the connections Secret; removed when the test ends.
func (s *stack) setConnection(t *testing.T, conn, base string, zones ...string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\nproxy:\n  perDriver:\n    topology:\n", base)
	for _, z := range zones {
		fmt.Fprintf(&b, "    - requirements: {zone: %s}\n", z)
	}
	s.setConnectionText(t, conn, b.String())
}

// setConnectionText writes the file of connection conn into the
// connections Secret; it is removed when the test ends.
func (s *stack) setConnectionText(t *testing.T, conn, text string) {
	t.Helper()
	editConnections(t, s.c, func(data map[string][]byte) { data[conn+".yaml"] = []byte(text) })
	t.Cleanup(func() {
		editConnections(t, s.c, func(data map[string][]byte) { delete(data, conn+".yaml") })
	})
}

// capacity asks the controller what the provisioner would: GetCapacity
// for conn in a zone (with the segments a node of that zone reports).
func (s *stack) capacity(t *testing.T, conn, zone string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := csi.NewControllerClient(s.controller.conn).GetCapacity(ctx, &csi.GetCapacityRequest{
		Parameters: map[string]string{"connection": conn},
		AccessibleTopology: &csi.Topology{Segments: map[string]string{
			prefix + "/cluster": "local", prefix + "/region": "region1", prefix + "/zone": zone,
		}},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}},
	})
	if err != nil {
		t.Fatalf("GetCapacity %s %s: %v", conn, zone, err)
	}
	return resp.GetAvailableCapacity()
}

// provisioningFailed returns the message of the provisioner's first
// ProvisioningFailed event for claim that has every one of words, or "".
func (s *stack) provisioningFailed(t *testing.T, claim string, words ...string) string {
	t.Helper()
	list, err := s.c.client.CoreV1().Events(modesNamespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=PersistentVolumeClaim,involvedObject.name=" + claim + ",reason=ProvisioningFailed",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		all := true
		for _, w := range words {
			all = all && strings.Contains(e.Message, w)
		}
		if all {
			return e.Message
		}
	}
	return ""
}

// unschedulable says whether kube-scheduler reported the pod unschedulable.
func (s *stack) unschedulable(t *testing.T, pod string) bool {
	t.Helper()
	p, err := s.c.client.CoreV1().Pods(modesNamespace).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}
