package csi_test

import (
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
)

// TestUpstreamTopologyNeverWidened (SPEC §8): an upstream that answers
// accessible_topology says its volume is not reachable everywhere. Behind
// a connection without topology (type zone or cluster) the volume is
// deleted again and CreateVolume fails with FAILED_PRECONDITION naming the
// connection, the upstream's segments and what to declare; with topology
// declared, or under type node, the proxy's own topology is returned and
// the upstream's keys never reach the CO.
func TestUpstreamTopologyNeverWidened(t *testing.T) {
	zone1 := []accessible.Entry{{Requirements: map[string]string{"zone": "z1"}}}
	tests := []struct {
		name       string
		entries    []accessible.Entry
		typ        string
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
		{name: "type node pins it anyway", typ: "node", upstream: upstreamTopology},
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
			resp, err := p.Controller.CreateVolume(callCtx(t), createReq("pvc-1", map[string]string{"connection": "a"}))
			if tt.wantCode != codes.OK {
				wantCode(t, err, tt.wantCode, tt.wantMsg...)
			} else if err != nil {
				t.Fatal(err)
			} else if tt.typ == "" {
				if d := diff(tt.wantTopo, resp.GetVolume().GetAccessibleTopology()); d != "" {
					t.Errorf("accessible_topology (-want +got):\n%s", d)
				}
			} else {
				for _, tp := range resp.GetVolume().GetAccessibleTopology() {
					if _, ok := tp.GetSegments()["upstream.example.com/rack"]; ok {
						t.Errorf("an upstream key reached the CO: %v", tp)
					}
				}
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
