package kube

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// spreadConnections are scenario 3's connections: one zone, two zones,
// everywhere (every node reports <prefix>/cluster=local).
var spreadConnections = map[string][]map[string]string{
	"spread-one": {{"zone": "zone1"}},
	"spread-two": {{"zone": "zone1"}, {"zone": "zone2"}},
	"spread-all": {{"cluster": "local"}},
}

// spreadAllowed is the allowedTopologies of the scenario's mode-2 classes.
var spreadAllowed = []string{"zone2", "zone3"}

// TestSpread is scenario 3 of issue 14: 30 claims over three zones
// (worker-zone3-a joins for it), three connections and the three modes
// of SPEC §9 (one class per connection and mode), each with a pod. No PV
// may be reachable outside its class's allowedTopologies or its
// connection's topology, every pod is scheduled onto a node its PV admits,
// and exactly the claims whose class allows no zone the connection serves
// (spread-one with zone2, zone3) stay Pending with RESOURCE_EXHAUSTED.
func TestSpread(t *testing.T) {
	s := startStack(t)
	c := s.c
	ctx := context.Background()
	ensureModesNamespace(t, c)
	s.addZone3Node(t)

	// One class per connection and mode.
	imm, wffc := storagev1.VolumeBindingImmediate, storagev1.VolumeBindingWaitForFirstConsumer
	var classes []*storagev1.StorageClass
	for conn, topo := range spreadConnections {
		var b strings.Builder
		fmt.Fprintf(&b, "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\nproxy:\n  perDriver:\n    topology:\n", filepath.Join(s.base, conn))
		for _, entry := range topo {
			for k, v := range entry {
				fmt.Fprintf(&b, "    - requirements: {%s: %s}\n", k, v)
			}
		}
		s.setConnectionText(t, conn, b.String())
		for _, mode := range []string{"imm", "allowed", "wffc"} {
			sc := &storagev1.StorageClass{
				ObjectMeta:        metav1.ObjectMeta{Name: conn + "-" + mode},
				Provisioner:       driverName,
				VolumeBindingMode: &imm,
				Parameters:        map[string]string{"connection": conn},
			}
			switch mode {
			case "allowed":
				sc.AllowedTopologies = []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{
					{Key: prefix + "/zone", Values: spreadAllowed},
				}}}
			case "wffc":
				sc.VolumeBindingMode = &wffc
			}
			if _, err := c.client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.client.StorageV1().StorageClasses().Delete(ctx, sc.Name, metav1.DeleteOptions{}) })
			classes = append(classes, sc)
		}
	}
	slices.SortFunc(classes, func(a, b *storagev1.StorageClass) int { return strings.Compare(a.Name, b.Name) })
	// The WaitForFirstConsumer classes have capacity in all three zones.
	for _, sc := range classes {
		if *sc.VolumeBindingMode == wffc {
			s.waitCapacity(t, sc.Name, 3)
		}
	}

	type claim struct {
		name string
		sc   *storagev1.StorageClass
	}
	var claims []claim
	for i := range 30 {
		cl := claim{fmt.Sprintf("spread-%02d", i), classes[i%len(classes)]}
		createClaim(t, c, cl.name, cl.sc.Name)
		createPod(t, c, cl.name, cl.name, nil)
		claims = append(claims, cl)
	}
	pending := func(cl claim) bool { return cl.sc.Name == "spread-one-allowed" }

	var pvs []string
	for _, cl := range claims {
		if pending(cl) {
			continue
		}
		pvc, pod := s.waitBoundAndScheduled(t, cl.name, cl.name)
		pv, err := c.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pvs = append(pvs, pv.Name)
		terms, err := affinityTerms(pv)
		if err != nil {
			t.Fatal(err)
		}
		if len(terms) == 0 {
			t.Errorf("%s (%s): PV %s has no node affinity", cl.name, cl.sc.Name, pv.Name)
		}
		for _, term := range terms {
			if err := insideClass(term, cl.sc); err != nil {
				t.Errorf("%s (%s): PV %s: %v", cl.name, cl.sc.Name, pv.Name, err)
			}
		}
		node, err := c.client.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !admits(terms, node.Labels) {
			t.Errorf("%s (%s): pod on %s, which PV affinity %v does not admit", cl.name, cl.sc.Name, node.Name, terms)
		}
	}
	for _, cl := range claims {
		if !pending(cl) {
			continue
		}
		deadline := time.Now().Add(60 * time.Second)
		for s.provisioningFailed(t, cl.name, "ResourceExhausted", "spread-one") == "" {
			if time.Now().After(deadline) {
				t.Fatalf("%s (%s): no RESOURCE_EXHAUSTED after 60s\nevents:\n%s", cl.name, cl.sc.Name, s.events(t))
			}
			time.Sleep(200 * time.Millisecond)
		}
		pvc, err := c.client.CoreV1().PersistentVolumeClaims(modesNamespace).Get(ctx, cl.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pvc.Status.Phase != corev1.ClaimPending || pvc.Spec.VolumeName != "" {
			t.Errorf("%s (%s): %s with volume %q; spread-one serves neither zone2 nor zone3", cl.name, cl.sc.Name, pvc.Status.Phase, pvc.Spec.VolumeName)
		}
	}
	t.Logf("%d claims bound, %d refused", len(pvs), len(claims)-len(pvs))

	for _, cl := range claims {
		deletePod(t, c, cl.name)
		if err := c.client.CoreV1().PersistentVolumeClaims(modesNamespace).Delete(ctx, cl.name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, pv := range pvs {
		deadline := time.Now().Add(60 * time.Second)
		for {
			_, err := c.client.CoreV1().PersistentVolumes().Get(ctx, pv, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("PV %s not deleted after 60s: %v", pv, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// insideClass checks one term of a PV's node affinity (sorted key=value
// pairs) against its class: its zone is one the class allows, and the
// term lies inside an entry of the connection's topology.
func insideClass(term string, sc *storagev1.StorageClass) error {
	labels := map[string]string{}
	for _, kv := range strings.Split(term, ",") {
		k, v, _ := strings.Cut(kv, "=")
		labels[k] = v
	}
	if len(sc.AllowedTopologies) > 0 {
		if z, ok := labels[prefix+"/zone"]; !ok || !slices.Contains(spreadAllowed, z) {
			return fmt.Errorf("term {%s} is outside the class's allowedTopologies %v", term, spreadAllowed)
		}
	}
	for _, entry := range spreadConnections[sc.Parameters["connection"]] {
		inside := true
		for k, v := range entry {
			inside = inside && labels[prefix+"/"+k] == v
		}
		if inside {
			return nil
		}
	}
	return fmt.Errorf("term {%s} is outside connection %s's topology %v", term, sc.Parameters["connection"], spreadConnections[sc.Parameters["connection"]])
}

// addZone3Node adds worker-zone3-a for the test: a Node with zone3 labels,
// the node DaemonSet's pod's plugin registered, Ready. It is removed (Node and CSINode)
// when the test ends, so the other tests see the usual nodes.
func (s *stack) addZone3Node(t *testing.T) {
	t.Helper()
	c := s.c
	ctx := context.Background()
	name := "worker-zone3-a"
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		zoneLabel: "zone3", regionLbl: "region1", "kubernetes.io/hostname": name,
	}}}
	if _, err := c.client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.client.StorageV1().CSINodes().Delete(ctx, name, metav1.DeleteOptions{})
		_ = c.client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	})
	registerDaemonSetNodes(t, c, Namespace, "proxy-topology-node", map[string]map[string]string{name: nil})
}
