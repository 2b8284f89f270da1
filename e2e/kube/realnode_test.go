package kube

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRealNodeLabels: node labels come from kubelet. Each node's zone is
// derived by the chart's fromRegexp rule from its node name (node-z1-a →
// zone z1); kubelet called NodeGetInfo on the node plugin (a container it
// runs) and put the prefixed segments on its Node, and CSINode lists the
// driver with those topology keys. No test code writes a Node label.
func TestRealNodeLabels(t *testing.T) {
	r := withRealNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wantKeys := []string{rnPrefix + "/cluster", rnZoneKey}
	for _, n := range r.nodes {
		waitFor(t, "the labels of Node "+n.name, time.Minute, func() (bool, string) {
			node, err := r.c.client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			l := node.Labels
			return l[rnZoneKey] == n.zone && l[rnPrefix+"/cluster"] == "local", fmt.Sprint(l)
		})
		cn, err := r.c.client.StorageV1().CSINodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, d := range cn.Spec.Drivers {
			if d.Name != rnDriver {
				continue
			}
			found = true
			keys := slices.Sorted(slices.Values(d.TopologyKeys))
			if !slices.Equal(keys, wantKeys) {
				t.Errorf("CSINode %s: driver %s topology keys %v, want %v", n.name, d.Name, keys, wantKeys)
			}
			if d.NodeID != n.name {
				t.Errorf("CSINode %s: node ID %q, want the node name", n.name, d.NodeID)
			}
		}
		if !found {
			t.Errorf("CSINode %s does not list %s", n.name, rnDriver)
		}
		calls := n.registrationCalls
		if calls["NodeGetInfo "] < 1 {
			t.Errorf("%s: the node plugin served no NodeGetInfo (calls %v)", n.name, calls)
		}
		t.Logf("%s: zone %s from kubelet; node plugin calls at registration %v", n.name, n.zone, calls)
	}
}
