package e2e

import (
	"slices"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// outcome is what CreateVolume must answer for one connection.
type outcome struct {
	code codes.Code
	// topology is the exact accessible_topology of a created volume.
	topology []*csi.Topology
	// termsOfRequest: the topology is the request's terms instead, for a
	// connection without a topology list (SPEC §8: never wider than the
	// terms); none without requirements.
	termsOfRequest bool
}

func created(topology []*csi.Topology) outcome { return outcome{code: codes.OK, topology: topology} }

// connectionTopology is each connection's whole list, as ControllerGetVolume
// reports it (nil: everywhere).
var connectionTopology = map[string][]*csi.Topology{"z1": offeredZ1, "z2": offeredZ2, "all": nil}

// narrowedToTerms: created, accessible from exactly the request's terms
// (requisite, else preferred), preferred ones first in preferred order.
var narrowedToTerms = outcome{code: codes.OK, termsOfRequest: true}

// forRequest resolves termsOfRequest for req.
func (o outcome) forRequest(req *csi.TopologyRequirement) outcome {
	if !o.termsOfRequest {
		return o
	}
	terms := req.GetRequisite()
	if len(terms) == 0 {
		terms = req.GetPreferred()
	}
	var out []*csi.Topology
	add := func(t *csi.Topology) {
		if !slices.ContainsFunc(out, func(o *csi.Topology) bool { return proto.Equal(o, t) }) {
			out = append(out, t)
		}
	}
	for _, p := range req.GetPreferred() {
		if slices.ContainsFunc(terms, func(t *csi.Topology) bool { return proto.Equal(t, p) }) {
			add(p)
		}
	}
	for _, t := range terms {
		add(t)
	}
	return outcome{code: o.code, topology: out}
}

// exhausted: the connection does not serve the requested topology (SPEC §8).
var exhausted = outcome{code: codes.ResourceExhausted}

// modeCase is one StorageClass + provisioner configuration of SPEC §9 and
// what each connection must answer. The requirements themselves come from
// the provisioner model (provisioner_test.go) applied to the nodes'
// NodeGetInfo answers; only the outcomes are written down here.
type modeCase struct {
	name  string
	claim claimRequest
	// want is keyed by connection: z1 (zone1), z2 (zone2 + extra label),
	// all (no topology: cluster-wide).
	want map[string]outcome
}

func modeCases() []modeCase {
	allowed := func(zones ...string) []selectorTerm {
		return []selectorTerm{{{key: zoneKey, values: zones}}}
	}
	// Mode 1 must never fail; every connection gets its own topology.
	everywhere := map[string]outcome{"z1": created(offeredZ1), "z2": created(offeredZ2), "all": narrowedToTerms}
	zone1Only := map[string]outcome{"z1": created(offeredZ1), "z2": exhausted, "all": narrowedToTerms}
	zone2Only := map[string]outcome{"z1": exhausted, "z2": created(offeredZ2), "all": narrowedToTerms}
	return []modeCase{
		// Mode 1: Immediate, no allowedTopologies. With the provisioner's
		// default --immediate-topology=true the requisite is one term per
		// distinct node topology ({zone1}, {zone2}) and preferred is that
		// list rotated by the claim-name hash; the two StatefulSet replicas
		// get the two rotations.
		{
			name:  "mode1/immediate-topology=true/data-web-0",
			claim: claimRequest{pvcName: "data-web-0", flags: provisionerFlags{immediateTopology: true}},
			want:  everywhere,
		},
		{
			name:  "mode1/immediate-topology=true/data-web-1",
			claim: claimRequest{pvcName: "data-web-1", flags: provisionerFlags{immediateTopology: true}},
			want:  everywhere,
		},
		{
			// No requirements at all.
			name:  "mode1/immediate-topology=false",
			claim: claimRequest{pvcName: "data-db-0", flags: provisionerFlags{immediateTopology: false}},
			want:  everywhere,
		},
		// Mode 2: allowedTopologies on <prefix>/zone, --strict-topology=false.
		// Requisite = the flattened allowed terms; fails iff no allowed zone
		// is offered by the connection.
		{
			name:  "mode2/allowed=zone1",
			claim: claimRequest{pvcName: "claim-a", allowedTopologies: allowed("zone1"), flags: provisionerFlags{immediateTopology: true}},
			want:  zone1Only,
		},
		{
			name:  "mode2/allowed=zone2",
			claim: claimRequest{pvcName: "claim-b", allowedTopologies: allowed("zone2"), flags: provisionerFlags{immediateTopology: true}},
			want:  zone2Only,
		},
		{
			name:  "mode2/allowed=zone1,zone2",
			claim: claimRequest{pvcName: "claim-c", allowedTopologies: allowed("zone2", "zone1"), flags: provisionerFlags{immediateTopology: true}},
			want:  everywhere,
		},
		{
			name:  "mode2/allowed=zone3",
			claim: claimRequest{pvcName: "claim-d", allowedTopologies: allowed("zone3"), flags: provisionerFlags{immediateTopology: true}},
			want:  map[string]outcome{"z1": exhausted, "z2": exhausted, "all": narrowedToTerms},
		},
		{
			// WaitForFirstConsumer without strict topology: requisite is
			// still the allowed list and preferred starts at the selected
			// node's zone; the pod's node does not restrict the volume.
			name: "mode2/allowed=zone1,zone2/wait-for-first-consumer/node-c",
			claim: claimRequest{pvcName: "claim-e", allowedTopologies: allowed("zone1", "zone2"), selectedNode: nodeC,
				flags: provisionerFlags{immediateTopology: true}},
			want: everywhere,
		},
		// Mode 3: WaitForFirstConsumer, --strict-topology=true: requisite =
		// preferred = [selected node's topology]. A connection that does not
		// serve that zone answers RESOURCE_EXHAUSTED so the scheduler picks
		// another node.
		{
			name:  "mode3/strict/node-a",
			claim: claimRequest{pvcName: "claim-f", selectedNode: nodeA, flags: provisionerFlags{strictTopology: true, immediateTopology: true}},
			want:  zone1Only,
		},
		{
			name:  "mode3/strict/node-b",
			claim: claimRequest{pvcName: "claim-g", selectedNode: nodeB, flags: provisionerFlags{strictTopology: true, immediateTopology: true}},
			want:  zone1Only,
		},
		{
			name:  "mode3/strict/node-c",
			claim: claimRequest{pvcName: "claim-h", selectedNode: nodeC, flags: provisionerFlags{strictTopology: true, immediateTopology: true}},
			want:  zone2Only,
		},
	}
}
