package e2e

import (
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
)

// TestProvisionerModel pins the requirement builder to hand-derived answers,
// so that the end-to-end expectations rest on a checked model of the
// external-provisioner rather than on whatever the model happens to do.
func TestProvisionerModel(t *testing.T) {
	nodes := []k8sNode{
		{name: "a", topologyKeys: []string{zoneKey}, labels: map[string]string{zoneKey: "zone1", "other": "x"}},
		{name: "b", topologyKeys: []string{zoneKey}, labels: map[string]string{zoneKey: "zone1"}},
		{name: "c", topologyKeys: []string{zoneKey}, labels: map[string]string{zoneKey: "zone2"}},
	}
	z1, z2, z3 := zoneTopology("zone1"), zoneTopology("zone2"), zoneTopology("zone3")
	both := []selectorTerm{{{key: zoneKey, values: []string{"zone2", "zone1"}}}}
	tests := []struct {
		name string
		req  claimRequest
		want *csi.TopologyRequirement
	}{
		{
			// fnv32("web") = 1181096325, odd: rotate by 1.
			name: "immediate-topology, one term per distinct node topology, spread by claim name",
			req:  claimRequest{pvcName: "data-web-0", flags: provisionerFlags{immediateTopology: true}},
			want: &csi.TopologyRequirement{Requisite: []*csi.Topology{z1, z2}, Preferred: []*csi.Topology{z2, z1}},
		},
		{
			name: "next StatefulSet replica starts at the next term",
			req:  claimRequest{pvcName: "data-web-1", flags: provisionerFlags{immediateTopology: true}},
			want: &csi.TopologyRequirement{Requisite: []*csi.Topology{z1, z2}, Preferred: []*csi.Topology{z1, z2}},
		},
		{
			name: "no immediate-topology: no requirements",
			req:  claimRequest{pvcName: "data-web-0"},
			want: nil,
		},
		{
			name: "allowedTopologies flattened and sorted",
			req:  claimRequest{pvcName: "data-web-0", allowedTopologies: both},
			want: &csi.TopologyRequirement{Requisite: []*csi.Topology{z1, z2}, Preferred: []*csi.Topology{z2, z1}},
		},
		{
			name: "allowedTopologies distributes values over expressions",
			req: claimRequest{pvcName: "x", allowedTopologies: []selectorTerm{
				{{key: zoneKey, values: []string{"zone3"}}, {key: "rack", values: []string{"r1", "r2"}}},
			}},
			want: func() *csi.TopologyRequirement {
				r1 := &csi.Topology{Segments: map[string]string{zoneKey: "zone3", "rack": "r1"}}
				r2 := &csi.Topology{Segments: map[string]string{zoneKey: "zone3", "rack": "r2"}}
				// fnv32("x") = 84696423, odd: rotate by 1.
				return &csi.TopologyRequirement{Requisite: []*csi.Topology{r1, r2}, Preferred: []*csi.Topology{r2, r1}}
			}(),
		},
		{
			name: "allowedTopologies with a selected node, not strict: preferred starts at the node's zone",
			req:  claimRequest{pvcName: "x", allowedTopologies: both, selectedNode: "c"},
			want: &csi.TopologyRequirement{Requisite: []*csi.Topology{z1, z2}, Preferred: []*csi.Topology{z2, z1}},
		},
		{
			name: "strict: only the selected node's topology keys",
			req:  claimRequest{pvcName: "x", selectedNode: "a", flags: provisionerFlags{strictTopology: true, immediateTopology: true}},
			want: &csi.TopologyRequirement{Requisite: []*csi.Topology{z1}, Preferred: []*csi.Topology{z1}},
		},
		{
			name: "allowed zone nobody has",
			req:  claimRequest{pvcName: "x", allowedTopologies: []selectorTerm{{{key: zoneKey, values: []string{"zone3"}}}}},
			want: &csi.TopologyRequirement{Requisite: []*csi.Topology{z3}, Preferred: []*csi.Topology{z3}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := accessibilityRequirements(tt.req, nodes)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("requirements (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("strict with a node outside allowedTopologies is refused", func(t *testing.T) {
		req := claimRequest{pvcName: "x", selectedNode: "c", flags: provisionerFlags{strictTopology: true},
			allowedTopologies: []selectorTerm{{{key: zoneKey, values: []string{"zone1"}}}}}
		if got, err := accessibilityRequirements(req, nodes); err == nil {
			t.Errorf("got %v, want an error", got)
		}
	})
}
