package accessible

import (
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
)

// The three StorageClass modes of SPEC §9, with requirements shaped the way
// the external-provisioner (v6, GenerateAccessibilityRequirements in
// pkg/controller/topology.go) builds them:
//
//   - no selected node, no allowedTopologies: with --immediate-topology=false
//     no requirement at all; with --immediate-topology=true (its default)
//     requisite = one term per distinct node topology in the cluster, sorted,
//     and preferred = the same terms rotated by a hash of the PVC name;
//   - allowedTopologies: requisite = the allowed terms flattened (each value
//     of an expression becomes its own term), sorted; preferred = rotated as
//     above, or, with a selected node and --strict-topology=false, rotated to
//     start at the term containing the selected node's topology;
//   - --strict-topology=true with a selected node (WaitForFirstConsumer):
//     requisite = preferred = [selected node's topology].

// rotate mimics the provisioner's preferred order: requisite starting at i.
func rotate(terms []*csi.Topology, i int) []*csi.Topology {
	return append(append([]*csi.Topology{}, terms[i:]...), terms[:i]...)
}

func TestStorageClassModes(t *testing.T) {
	offersZ1Z2 := []Entry{
		{Requirements: kvs("zone", "z1"), Extra: kvs("custom.io/storage", "s1")},
		zoneEntry("z2"),
	}
	decorated := topos(topo(pk("zone"), "z1", "custom.io/storage", "s1"), zoneTerm("z2"))

	// Nodes of a zone-type cluster report {<prefix>/zone}; three zones have nodes.
	clusterZones := topos(zoneTerm("z1"), zoneTerm("z2"), zoneTerm("z3"))
	// Nodes of a node-type cluster report {<prefix>/node} only.
	clusterNodes := topos(topo(pk("node"), "n1"), topo(pk("node"), "n2"), topo(pk("node"), "n3"))

	// allowedTopologies: [{matchLabelExpressions: [{key: <prefix>/zone, values: [z2, z3]}]}]
	allowedZ2Z3 := topos(zoneTerm("z2"), zoneTerm("z3"))

	runDecideCases(t, []decideCase{
		// Mode 1: Immediate, no allowedTopologies — never fails on
		// topology, PV affinity = connection topology.
		{
			name:    "mode 1 no requirements, --immediate-topology=false",
			req:     nil,
			entries: offersZ1Z2,
			opts:    zoneOpts,
			want:    decorated,
		},
		{
			name:    "mode 1 no requirements, --immediate-topology=true, zone nodes",
			req:     &csi.TopologyRequirement{Requisite: clusterZones, Preferred: rotate(clusterZones, 1)},
			entries: offersZ1Z2,
			opts:    zoneOpts,
			// Preferred starts at z2, so z2 comes first.
			want: topos(decorated[1], decorated[0]),
		},
		{
			// The seed's every-term rule failed here: z3 has nodes but no
			// entry, so not every per-node term matched.
			name:    "mode 1 no requirements, --immediate-topology=true, a zone the connection lacks",
			req:     &csi.TopologyRequirement{Requisite: clusterZones, Preferred: rotate(clusterZones, 2)},
			entries: []Entry{zoneEntry("z1")},
			opts:    zoneOpts,
			want:    topos(zoneTerm("z1")),
		},
		{
			name:    "mode 1 no requirements, --immediate-topology=true, node nodes",
			req:     &csi.TopologyRequirement{Requisite: clusterNodes, Preferred: rotate(clusterNodes, 2)},
			entries: offersZ1Z2,
			opts:    nodeOpts,
			want:    decorated,
		},

		// Mode 2: allowedTopologies, --strict-topology=false — fails iff no
		// allowed zone is offered; affinity ⊆ allowed ∩ connection.
		{
			name:    "mode 2 allowedTopologies, Immediate",
			req:     &csi.TopologyRequirement{Requisite: allowedZ2Z3, Preferred: rotate(allowedZ2Z3, 1)},
			entries: offersZ1Z2,
			opts:    zoneOpts,
			want:    topos(zoneTerm("z2")),
		},
		{
			name:    "mode 2 allowedTopologies, WaitForFirstConsumer on a z3 node",
			req:     &csi.TopologyRequirement{Requisite: allowedZ2Z3, Preferred: rotate(allowedZ2Z3, 1)},
			entries: []Entry{zoneEntry("z2"), zoneEntry("z3")},
			opts:    zoneOpts,
			want:    topos(zoneTerm("z3"), zoneTerm("z2")),
		},
		{
			name:    "mode 2 allowedTopologies, no allowed zone offered",
			req:     &csi.TopologyRequirement{Requisite: allowedZ2Z3, Preferred: allowedZ2Z3},
			entries: []Entry{zoneEntry("z1")},
			opts:    zoneOpts,
			wantMsg: `none of the topologies [{org.democratic-csi.topology/zone=z2}, {org.democratic-csi.topology/zone=z3}] (requisite) is accessible for connection "c1" (it offers [{org.democratic-csi.topology/zone=z1}])`,
		},

		// Mode 3: WaitForFirstConsumer, --strict-topology=true — the volume
		// goes to the selected node's zone, or RESOURCE_EXHAUSTED so the
		// scheduler picks another node.
		{
			name:    "mode 3 strict, selected node in an offered zone",
			req:     &csi.TopologyRequirement{Requisite: topos(zoneTerm("z2")), Preferred: topos(zoneTerm("z2"))},
			entries: offersZ1Z2,
			opts:    zoneOpts,
			want:    topos(zoneTerm("z2")),
		},
		{
			name:    "mode 3 strict, selected node in a zone not offered",
			req:     &csi.TopologyRequirement{Requisite: topos(zoneTerm("z3")), Preferred: topos(zoneTerm("z3"))},
			entries: offersZ1Z2,
			opts:    zoneOpts,
			wantMsg: `topology {org.democratic-csi.topology/zone=z3} (requisite) is not accessible for connection "c1" (it offers [{org.democratic-csi.topology/zone=z1}, {org.democratic-csi.topology/zone=z2}])`,
		},
		{
			name:    "mode 3 strict, node type, connection without topology list",
			req:     &csi.TopologyRequirement{Requisite: topos(topo(pk("node"), "n2")), Preferred: topos(topo(pk("node"), "n2"))},
			entries: nil,
			opts:    nodeOpts,
			want:    topos(topo(pk("node"), "n2")),
		},
	})
}
