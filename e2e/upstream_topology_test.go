package e2e

import (
	"fmt"
	"path/filepath"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/internal/testupstream"
	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
)

// TestUpstreamTopologyOverSockets (SPEC §13) runs `proxy-topology serve`
// in front of real upstreams over unix sockets, each answering every
// volume's accessible_topology in its own key (internal/testupstream,
// csi-driver-host-path's --enable-topology): a zonal one answering
// {fake.example.com/zone: z2}, a node-local one answering
// {fake.example.com/node: node-1}. Through connections whose
// upstreamTopology maps those keys, the zonal volume gets {<prefix>/zone:
// z2} and the node-local one is pinned to the node; a connection that
// maps nothing the upstream answers is refused with its key named; a
// GetCapacity naming no connection is OK with 0.
func TestUpstreamTopologyOverSockets(t *testing.T) {
	dir := newTestDir(t)
	upstream := func(name, key, nodeID string) string {
		s, err := testupstream.Start(filepath.Join(dir, "upstreams", name, "csi.sock"), testupstream.Profile{TopologyKey: key}, hostpath.Options{
			DriverName: "upstream.example.com", Version: "e2e", NodeID: nodeID, BasePath: filepath.Join(dir, "upstream-data", name),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		return s.Endpoint
	}
	zonal := upstream("zonal", "fake.example.com/zone", "z2")
	local := upstream("local", "fake.example.com/node", "node-1")
	for name, content := range map[string]string{
		"zonal":    fmt.Sprintf("driver: csi\ncsi:\n  endpoint: %s\nproxy:\n  perDriver:\n    upstreamTopology: {fake.example.com/zone: zone}\n", zonal),
		"local":    fmt.Sprintf("driver: csi\ncsi:\n  endpoint: %s\nproxy:\n  perDriver:\n    upstreamTopology: {fake.example.com/node: node}\n", local),
		"unmapped": fmt.Sprintf("driver: csi\ncsi:\n  endpoint: %s\nproxy:\n  perDriver:\n    upstreamTopology: {fake.example.com/rack: rack}\n", zonal),
	} {
		testkit.WriteFile(t, filepath.Join(dir, "connections", name+".yaml"), content, 0o640)
	}
	cfg := filepath.Join(dir, "config", "proxy.yaml")
	testkit.WriteFile(t, cfg, fmt.Sprintf("driver: proxy\nproxy:\n  configFolder: %s\n  nodeTopology:\n    type: zone\n    prefix: %s\n    fromRegexp:\n    - topologyKey: zone\n      source: env\n      envName: ZONE\n",
		filepath.Join(dir, "connections"), prefix), 0o640)
	p := startProcess(t, dir, processSpec{name: "proxy", mode: "all", nodeID: "node-1", config: cfg, env: []string{"ZONE=z1"}})
	ctrl := csi.NewControllerClient(p.conn)

	nodeKey := prefix + "/node"
	for _, tc := range []struct {
		conn string
		req  *csi.TopologyRequirement
		want []*csi.Topology
		code codes.Code
		msg  []string
	}{
		{conn: "zonal", req: &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: map[string]string{zoneKey: "z2"}}}},
			want: []*csi.Topology{{Segments: map[string]string{zoneKey: "z2"}}}},
		{conn: "local", want: []*csi.Topology{{Segments: map[string]string{nodeKey: "node-1"}}}},
		{conn: "unmapped", code: codes.FailedPrecondition,
			msg: []string{`connection "unmapped"`, `key "fake.example.com/zone"`, "proxy.perDriver.upstreamTopology does not map", "the upstream object was deleted"}},
	} {
		t.Run(tc.conn, func(t *testing.T) {
			resp, err := ctrl.CreateVolume(callCtx(t), &csi.CreateVolumeRequest{
				Name: "pvc-" + tc.conn, Parameters: map[string]string{"connection": tc.conn}, AccessibilityRequirements: tc.req,
				VolumeCapabilities: []*csi.VolumeCapability{{
					AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
					AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
				}},
			})
			if tc.code != codes.OK {
				testkit.WantCode(t, err, tc.code, tc.msg...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, resp.GetVolume().GetAccessibleTopology(), protocmp.Transform()); d != "" {
				t.Errorf("accessible_topology (-want +got):\n%s", d)
			}
		})
	}

	resp, err := ctrl.GetCapacity(callCtx(t), &csi.GetCapacityRequest{})
	if err != nil || resp.GetAvailableCapacity() != 0 {
		t.Errorf("GetCapacity without a connection = %v, %v; want OK with 0", resp, err)
	}
}
