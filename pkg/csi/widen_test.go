package csi_test

import (
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
)

// TestUpstreamTopologyNeverWidened (SPEC §8): an upstream that answers
// accessible_topology says its volume is not reachable everywhere. Behind
// a connection without topology (type zone or cluster) the volume is
// deleted again and CreateVolume fails with FAILED_PRECONDITION naming the
// connection, the upstream's segments and what to declare. Under type node
// the same happens unless the request names a node to pin the volume to:
// without requirements, or with terms that name no node, the volume would
// be reported reachable everywhere (or from a whole zone the upstream
// knows nothing of). With topology declared the proxy's own topology is
// returned; the upstream's keys never reach the CO.
func TestUpstreamTopologyNeverWidened(t *testing.T) {
	zone1 := []accessible.Entry{{Requirements: map[string]string{"zone": "z1"}}}
	nodeKey := testPrefix + "/node"
	tests := []struct {
		name       string
		entries    []accessible.Entry
		typ        string
		req        *csi.TopologyRequirement
		upstream   []*csi.Topology
		deleteErr  error
		wantCode   codes.Code
		wantMsg    []string
		wantTopo   []*csi.Topology
		wantDelete bool
	}{
		{
			name: "no topology, upstream answers one", upstream: upstreamTopology,
			wantCode: codes.FailedPrecondition, wantDelete: true,
			wantMsg: []string{`connection "a"`, "upstream answered accessible_topology [{upstream.example.com/rack=r7}]",
				"declares no proxy.perDriver.topology", "a.yaml", "the upstream object was deleted"},
		},
		{
			name: "no topology, rollback fails", upstream: upstreamTopology, deleteErr: status.Error(codes.Unavailable, "array offline"),
			wantCode: codes.Internal, wantDelete: true,
			wantMsg: []string{"upstream.example.com/rack=r7", "deleting the upstream object also failed", "array offline"},
		},
		{name: "no topology, upstream answers none"},
		{
			name: "topology declared: the proxy's own is returned", entries: zone1, upstream: upstreamTopology,
			wantTopo: []*csi.Topology{topo(testPrefix+"/zone", "z1")},
		},
		{
			name: "type node, no requirements: nothing to pin to", typ: "node", upstream: upstreamTopology,
			wantCode: codes.FailedPrecondition, wantDelete: true,
			wantMsg: []string{`connection "a"`, "upstream answered accessible_topology [{upstream.example.com/rack=r7}]",
				"name no node (" + nodeKey + ")", "a.yaml", "the upstream object was deleted"},
		},
		{
			name: "type node, terms name no node: nothing to pin to", typ: "node", upstream: upstreamTopology,
			req:      &csi.TopologyRequirement{Requisite: []*csi.Topology{topo(testPrefix+"/zone", "z1")}},
			wantCode: codes.FailedPrecondition, wantDelete: true,
			wantMsg: []string{"upstream.example.com/rack=r7", "name no node (" + nodeKey + ")", "a.yaml"},
		},
		{
			name: "type node, a node asked for: pinned to it", typ: "node", upstream: upstreamTopology,
			req: &csi.TopologyRequirement{
				Requisite: []*csi.Topology{topo(nodeKey, "n1"), topo(nodeKey, "n2")},
				Preferred: []*csi.Topology{topo(nodeKey, "n2"), topo(nodeKey, "n1")},
			},
			wantTopo: []*csi.Topology{topo(nodeKey, "n2")},
		},
		{name: "type node, upstream answers none: everywhere", typ: "node"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeUpstream(t)
			f.setResponse("CreateVolume", &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: "vol-1", AccessibleTopology: tt.upstream}})
			if tt.deleteErr != nil {
				f.setErr("DeleteVolume", tt.deleteErr)
			}
			opt := func(*pcsi.Options) {}
			if tt.typ != "" {
				opt = func(o *pcsi.Options) { o.Topology.Type = tt.typ }
			}
			p := startProxy(t, opt)
			p.add(t, "a", conn{Endpoint: f.Endpoint, Topology: tt.entries})
			req := createReq("pvc-1", map[string]string{"connection": "a"})
			req.AccessibilityRequirements = tt.req
			resp, err := p.Controller.CreateVolume(callCtx(t), req)
			if tt.wantCode != codes.OK {
				testkit.WantCode(t, err, tt.wantCode, tt.wantMsg...)
			} else if err != nil {
				t.Fatal(err)
			} else if d := diff(tt.wantTopo, resp.GetVolume().GetAccessibleTopology()); d != "" {
				t.Errorf("accessible_topology (-want +got):\n%s", d)
			}
			deletes := f.requests("DeleteVolume")
			if tt.wantDelete {
				if len(deletes) != 1 || deletes[0].(*csi.DeleteVolumeRequest).GetVolumeId() != "vol-1" {
					t.Errorf("DeleteVolume requests %v, want one for vol-1", deletes)
				}
			} else if len(deletes) != 0 {
				t.Errorf("DeleteVolume requests %v, want none", deletes)
			}
		})
	}
}
