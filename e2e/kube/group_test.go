package kube

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// groupZones are the zones of the group scenario, each served by one
// member: grp-zone1, grp-zone2, grp-zone3, each a `driver: csi`
// connection to its own fake upstream (the volume handle it answers is
// the CSI name, so a PV's handle says which member holds it).
var groupZones = []string{"zone1", "zone2", "zone3"}

// groupRig is the storage side of the group scenario.
type groupRig struct {
	s       *stack
	members map[string]*fakeUpstream // member connection -> its upstream
}

// startGroupRig starts the stack with worker-zone3-a, the three members
// and the group grp-zones, and replaces the stack's csi-provisioner with
// one run with --immediate-topology=true: that is what rotates the
// preferred terms of Immediate claims over the zones (SPEC §11), so an
// Immediate group class spreads. WaitForFirstConsumer claims in strict
// mode do not depend on the flag.
func startGroupRig(t *testing.T) *groupRig {
	t.Helper()
	s := startStack(t)
	ensureModesNamespace(t, s.c)
	s.addZone3Node(t)
	r := &groupRig{s: s, members: map[string]*fakeUpstream{}}
	for _, z := range groupZones {
		m := "grp-" + z
		r.members[m] = startFakeUpstream(t, 10*gi, false)
		s.setConnectionText(t, m, r.members[m].connectionText(z))
	}
	s.setConnectionText(t, "grp-zones", "driver: group\ngroup:\n  members: [grp-zone1, grp-zone2, grp-zone3]\n")
	s.restartProvisioner(t, "--immediate-topology=false", "--immediate-topology=true")
	return r
}

// restartProvisioner stops the stack's csi-provisioner and runs it again
// with flag from replaced by to (the same identity takes the leader lease
// at once).
func (s *stack) restartProvisioner(t *testing.T, from, to string) {
	t.Helper()
	i := slices.Index(s.provArgs, from)
	if i < 0 {
		t.Fatalf("the deployed csi-provisioner has no %s: %v", from, s.provArgs)
	}
	s.provisioner.stop()
	args := slices.Clone(s.provArgs)
	args[i] = to
	ctr := s.run.container(t, "csi-provisioner")
	t.Logf("csi-provisioner %s", strings.Join(args, " "))
	s.provisioner = startContainer(t, "csi-provisioner ("+to+")", tools["CSI_PROVISIONER"], args, envList(s.run.env(t, ctr)))
	s.provArgs = args
}

var reclaimDelete = corev1.PersistentVolumeReclaimDelete

// groupClass creates a StorageClass of connection conn with the binding
// mode; it is deleted when the test ends.
func (r *groupRig) groupClass(t *testing.T, name, conn string, mode storagev1.VolumeBindingMode) {
	t.Helper()
	ctx := context.Background()
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: name},
		Provisioner:       driverName,
		VolumeBindingMode: &mode,
		ReclaimPolicy:     &reclaimDelete,
		Parameters:        map[string]string{"connection": conn},
	}
	if _, err := r.s.c.client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.s.c.client.StorageV1().StorageClasses().Delete(ctx, name, metav1.DeleteOptions{}) })
}

// member returns the member whose upstream holds a PV (its handle is
// v:<member>/<CSI name>), checking the upstream made it.
func (r *groupRig) member(t *testing.T, pv *corev1.PersistentVolume) string {
	t.Helper()
	if pv.Spec.CSI == nil {
		t.Fatalf("PV %s is not a CSI volume", pv.Name)
	}
	h := pv.Spec.CSI.VolumeHandle
	m, handle, ok := strings.Cut(strings.TrimPrefix(h, "v:"), "/")
	up, isMember := r.members[m]
	if !strings.HasPrefix(h, "v:") || !ok || !isMember {
		t.Fatalf("PV %s: handle %q names no member of grp-zones", pv.Name, h)
	}
	up.mu.Lock()
	_, made := up.volumes[handle]
	up.mu.Unlock()
	if !made {
		t.Errorf("PV %s: member %s's upstream has no volume %s", pv.Name, m, handle)
	}
	return m
}

// deleteClaims deletes claims and waits for their PVs to go (reclaim
// Delete through the provisioner and the member).
func (r *groupRig) deleteClaims(t *testing.T, claims []string) {
	t.Helper()
	ctx := context.Background()
	var pvs []string
	for _, name := range claims {
		pvc, err := r.s.c.client.CoreV1().PersistentVolumeClaims(modesNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pvc.Spec.VolumeName != "" {
			pvs = append(pvs, pvc.Spec.VolumeName)
		}
		if err := r.s.c.client.CoreV1().PersistentVolumeClaims(modesNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, pv := range pvs {
		r.s.waitPVGone(t, pv)
	}
}

// TestGroups is SPEC §11 in a real cluster: kube-scheduler,
// kube-controller-manager (PV binder, StatefulSet controller), the real
// csi-provisioner with the deployed args (but --immediate-topology=true)
// and proxy-topology's controller, with one group over three members in
// three zones.
//
//   - A StatefulSet of 3 replicas spread over the zones
//     (topologySpreadConstraints) with a WaitForFirstConsumer group class:
//     each replica's PV comes from the member of its pod's zone.
//   - An Immediate group class: 30 claims spread over the members.
//   - A zone whose member reports zero capacity is avoided: the provisioner
//     publishes the group's capacity per zone (the sum of the members that
//     serve it), and kube-scheduler keeps a pod that prefers that zone out
//     of it, and a pod that requires it Pending.
func TestGroups(t *testing.T) {
	r := startGroupRig(t)
	r.groupClass(t, "grp-wffc", "grp-zones", storagev1.VolumeBindingWaitForFirstConsumer)
	r.groupClass(t, "grp-imm", "grp-zones", storagev1.VolumeBindingImmediate)
	// The group's capacity in each zone is its one member's.
	r.s.waitCapacityExactly(t, "grp-wffc", map[string]int64{"zone1": 10 * gi, "zone2": 10 * gi, "zone3": 10 * gi})

	t.Run("StatefulSet", r.statefulSet)
	t.Run("Immediate spread", r.immediateSpread)
	t.Run("zero capacity zone", r.zeroCapacity)
}

func (r *groupRig) statefulSet(t *testing.T) {
	c := r.s.c
	ctx := context.Background()
	labels := map[string]string{"app": "grp-sts"}
	replicas := int32(3)
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "grp-sts"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    &replicas,
			ServiceName: "grp-sts",
			// Pods never run (there is no kubelet), so OrderedReady would
			// wait for replica 0 forever.
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: zoneLabel, WhenUnsatisfiable: corev1.DoNotSchedule,
						LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
					}},
					Containers: []corev1.Container{{
						Name: "app", Image: "registry.k8s.io/pause:3.10",
						VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
					}},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{*claimSpec("data", "grp-wffc")},
		},
	}
	if _, err := c.client.AppsV1().StatefulSets(modesNamespace).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var claims []string
	t.Cleanup(func() {
		orphan := metav1.DeletePropagationOrphan
		_ = c.client.AppsV1().StatefulSets(modesNamespace).Delete(ctx, sts.Name, metav1.DeleteOptions{PropagationPolicy: &orphan})
		for i := range 3 {
			deletePod(t, c, fmt.Sprintf("grp-sts-%d", i))
		}
	})

	zones := map[string]string{} // zone -> pod
	var report []string
	for i := range 3 {
		pod, claim := fmt.Sprintf("grp-sts-%d", i), fmt.Sprintf("data-grp-sts-%d", i)
		r.waitExists(t, pod, claim)
		claims = append(claims, claim)
		pvc, p := r.s.waitBoundAndScheduled(t, claim, pod)
		node, err := c.client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pv, err := c.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		zone := node.Labels[zoneLabel]
		member := r.member(t, pv)
		if member != "grp-"+zone {
			t.Errorf("replica %d: pod on %s (%s), PV %s from member %s; want grp-%s", i, node.Name, zone, pv.Name, member, zone)
		}
		terms, err := affinityTerms(pv)
		if err != nil {
			t.Fatal(err)
		}
		if !admits(terms, node.Labels) || len(terms) != 1 {
			t.Errorf("replica %d: PV %s affinity %v; pod on %s (%v)", i, pv.Name, terms, node.Name, node.Labels)
		}
		if other, dup := zones[zone]; dup {
			t.Errorf("replicas %s and %s are both in %s: the spread constraint was not kept", other, pod, zone)
		}
		zones[zone] = pod
		report = append(report, fmt.Sprintf("pod %s on node %s (%s): claim %s -> PV %s (handle %s) on member %s",
			pod, node.Name, zone, claim, pv.Name, pv.Spec.CSI.VolumeHandle, member))
	}
	for _, l := range report {
		t.Log(l)
	}
	if len(zones) != 3 {
		t.Errorf("replicas in zones %v, want all three", zones)
	}
	orphan := metav1.DeletePropagationOrphan
	if err := c.client.AppsV1().StatefulSets(modesNamespace).Delete(ctx, sts.Name, metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		deletePod(t, c, fmt.Sprintf("grp-sts-%d", i))
	}
	r.deleteClaims(t, claims)
}

// waitExists waits for the StatefulSet controller to make a pod and its
// claim.
func (r *groupRig) waitExists(t *testing.T, pod, claim string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, perr := r.s.c.client.CoreV1().Pods(modesNamespace).Get(ctx, pod, metav1.GetOptions{})
		_, cerr := r.s.c.client.CoreV1().PersistentVolumeClaims(modesNamespace).Get(ctx, claim, metav1.GetOptions{})
		if perr == nil && cerr == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the StatefulSet controller made no pod %s and claim %s in 60s: %v, %v", pod, claim, perr, cerr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (r *groupRig) immediateSpread(t *testing.T) {
	c := r.s.c
	ctx := context.Background()
	var claims []string
	for i := range 30 {
		name := fmt.Sprintf("grp-imm-%02d", i)
		createClaim(t, c, name, "grp-imm")
		claims = append(claims, name)
	}
	spread := map[string]int{}
	deadline := time.Now().Add(120 * time.Second)
	for _, name := range claims {
		var pvc *corev1.PersistentVolumeClaim
		for {
			r.s.provisioner.alive(t)
			var err error
			pvc, err = c.client.CoreV1().PersistentVolumeClaims(modesNamespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if pvc.Status.Phase == corev1.ClaimBound {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("claim %s is %s after 120s\nevents:\n%s", name, pvc.Status.Phase, r.s.events(t))
			}
			time.Sleep(200 * time.Millisecond)
		}
		pv, err := c.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m := r.member(t, pv)
		spread[m]++
		// The PV is usable exactly in its member's zone.
		terms, err := affinityTerms(pv)
		if err != nil {
			t.Fatal(err)
		}
		if len(terms) != 1 || !strings.Contains(terms[0], prefix+"/zone="+strings.TrimPrefix(m, "grp-")) {
			t.Errorf("claim %s: PV %s from %s has affinity %v", name, pv.Name, m, terms)
		}
	}
	var members []string
	for m := range r.members {
		members = append(members, m)
	}
	sort.Strings(members)
	var figures []string
	for _, m := range members {
		figures = append(figures, fmt.Sprintf("%s=%d", m, spread[m]))
		// The provisioner rotates the preferred terms by the claims'
		// index suffix: 30 consecutive indexes over 3 zones are 10 each.
		if spread[m] != 10 {
			t.Errorf("member %s got %d of 30 claims, want 10", m, spread[m])
		}
	}
	t.Logf("30 Immediate claims over the members: %s", strings.Join(figures, ", "))
	r.deleteClaims(t, claims)
}

func (r *groupRig) zeroCapacity(t *testing.T) {
	c := r.s.c
	ctx := context.Background()
	// A second group whose zone3 member is full.
	full := startFakeUpstream(t, 0, false)
	r.s.setConnectionText(t, "grp-zone3-full", full.connectionText("zone3"))
	r.s.setConnectionText(t, "grp-full", "driver: group\ngroup:\n  members: [grp-zone1, grp-zone2, grp-zone3-full]\n")
	r.groupClass(t, "grp-full-wffc", "grp-full", storagev1.VolumeBindingWaitForFirstConsumer)
	r.s.waitCapacityExactly(t, "grp-full-wffc", map[string]int64{"zone1": 10 * gi, "zone2": 10 * gi, "zone3": 0})

	prefer3 := func(name, claim string) {
		t.Helper()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{
				Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
					Weight: 100, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
						Key: zoneLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"zone3"},
					}}},
				}}}},
				Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
					VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
				Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}},
			},
		}
		if _, err := c.client.CoreV1().Pods(modesNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deletePod(t, c, name) })
	}
	// Control: with capacity in zone3, the preference wins.
	createClaim(t, c, "grp-pref-ok", "grp-wffc")
	prefer3("grp-pref-ok", "grp-pref-ok")
	// The full zone: the same preference loses to capacity.
	createClaim(t, c, "grp-pref-full", "grp-full-wffc")
	prefer3("grp-pref-full", "grp-pref-full")
	// Requiring the full zone: unschedulable for lack of storage.
	createClaim(t, c, "grp-req-full", "grp-full-wffc")
	createPod(t, c, "grp-req-full", "grp-req-full", map[string]string{zoneLabel: "zone3"})

	_, ok := r.s.waitBoundAndScheduled(t, "grp-pref-ok", "grp-pref-ok")
	if ok.Spec.NodeName != "worker-zone3-a" {
		t.Errorf("control pod preferring zone3 (capacity there) is on %s, want worker-zone3-a", ok.Spec.NodeName)
	}
	pvc, p := r.s.waitBoundAndScheduled(t, "grp-pref-full", "grp-pref-full")
	pv, err := c.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := r.member(t, pv)
	if p.Spec.NodeName == "worker-zone3-a" || m == "grp-zone3-full" {
		t.Errorf("pod preferring the full zone3 is on %s with a PV from %s", p.Spec.NodeName, m)
	}
	if msg := r.s.provisioningFailed(t, "grp-pref-full"); msg != "" {
		t.Errorf("claim grp-pref-full: the provisioner failed once (the scheduler tried the full zone?): %s", msg)
	}
	msg := r.s.schedulingMessage(t, "grp-req-full")
	if !strings.Contains(msg, "did not have enough free storage") {
		t.Errorf("pod requiring zone3 is unschedulable, but not for storage capacity: %s", msg)
	}
	if n := full.Creates(); n != 0 {
		t.Errorf("the full member was asked for %d volumes", n)
	}
	t.Logf("zero capacity in zone3: the pod preferring zone3 went to %s (PV from %s); the pod requiring zone3: %s", p.Spec.NodeName, m, msg)
	for _, name := range []string{"grp-pref-ok", "grp-pref-full", "grp-req-full"} {
		deletePod(t, c, name)
	}
	r.deleteClaims(t, []string{"grp-pref-ok", "grp-pref-full", "grp-req-full"})
}

// TestHelmGroupConnection: the chart declares a group exactly as it
// declares a connection, as one more file of the connections Secret, and
// a StorageClass names it like any connection. The rendered Secret's
// files pass `proxy-topology check` (members found, group valid).
func TestHelmGroupConnection(t *testing.T) {
	need(t)
	values := `
connections:
  nas-zone1:
    driver: csi
    csi: {endpoint: unix:///csi/nas-zone1/csi.sock}
    proxy: {perDriver: {topology: [{requirements: {zone: zone1}}]}}
  nas-zone2:
    driver: csi
    csi: {endpoint: unix:///csi/nas-zone2/csi.sock}
    proxy: {perDriver: {topology: [{requirements: {zone: zone2}}]}}
  nas-zone3: |
    driver: csi
    csi:
      endpoint: unix:///csi/nas-zone3/csi.sock
    proxy:
      perDriver:
        topology:
        - requirements: {zone: zone3}
  nas-zones:
    driver: group
    group:
      members: [nas-zone1, nas-zone2, nas-zone3]
storageClasses:
- name: nas-zones
  volumeBindingMode: WaitForFirstConsumer
  parameters:
    connection: nas-zones
`
	path := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(path, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	objs := byKey(helmTemplate(t, "--values", path))
	var secret *unstructured.Unstructured
	for k, o := range objs {
		if o.GetKind() == "Secret" && strings.HasSuffix(k, "/connections") {
			secret = o
		}
	}
	if secret == nil {
		t.Fatalf("no connections Secret rendered: %v", keys(objs))
	}
	data, _, _ := unstructured.NestedStringMap(secret.Object, "data")
	folder := t.TempDir()
	for k, v := range data {
		raw, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(folder, k), raw, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := data["nas-zones.yaml"]; !ok {
		t.Fatalf("Secret keys %v: no nas-zones.yaml", keys(data))
	}
	sc, ok := objs["StorageClass/nas-zones"]
	if !ok {
		t.Fatalf("no StorageClass nas-zones: %v", keys(objs))
	}
	if conn, _, _ := unstructured.NestedString(sc.Object, "parameters", "connection"); conn != "nas-zones" {
		t.Errorf("StorageClass nas-zones: parameters.connection %q", conn)
	}
	// The chart's own main config, with the rendered files as its folder.
	cfg := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(cfg, []byte("driver: proxy\nproxy:\n  configFolder: "+folder+"\n  nodeTopology:\n    type: zone\n    fromRegexp:\n    - topologyKey: zone\n      source: env\n      envName: ZONE\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary, "check", "--config", cfg).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "nas-zones.yaml: ok") || !strings.Contains(string(out), "0 with errors") {
		t.Errorf("check of the rendered connections: %v\n%s", err, out)
	}
	// And the dry run sends a zone2 claim to nas-zone2.
	out, err = exec.Command(binary, "topology", "--config", cfg, "--node-name", "n", "--env", "ZONE=zone2", "--connection", "nas-zones", "--node-term").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "  member: nas-zone2\n") {
		t.Errorf("dry run of the rendered group: %v\n%s", err, out)
	}
}
