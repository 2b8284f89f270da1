package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

// nodeLocalNode is one node of the node-local deployment mode: a
// proxy-topology process serving controller and node services (--mode
// all), its own connection folder naming its own disk.
type nodeLocalNode struct {
	name string
	disk string // base path of the node-local connection "disk"
	proc *process
	ctrl csi.ControllerClient
	node csi.NodeClient
}

// startNodeLocalNodes starts one process per node name, each with zone z1
// from an env var, proxy.nodeLocal as given, and two local-hostpath
// connections: "disk" (node-local, on that node's own directory) and
// "shared" (one directory all nodes see, declared reachable from zone1).
func startNodeLocalNodes(t *testing.T, nodeLocal bool, names ...string) []*nodeLocalNode {
	t.Helper()
	dir := newTestDir(t)
	shared := filepath.Join(dir, "storage", "shared")
	var out []*nodeLocalNode
	for _, n := range names {
		connDir := filepath.Join(dir, "connections", n)
		disk := filepath.Join(dir, "storage", n)
		testkit.WriteFile(t, filepath.Join(connDir, "disk.yaml"), fmt.Sprintf("driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\n", disk), 0o640)
		testkit.WriteFile(t, filepath.Join(connDir, "shared.yaml"), fmt.Sprintf("driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\nproxy:\n  perDriver:\n    topology:\n    - requirements: {zone: zone1}\n", shared), 0o640)
		cfg := filepath.Join(dir, "config", n+".yaml")
		testkit.WriteFile(t, cfg, fmt.Sprintf(`driver: proxy
proxy:
  configFolder: %s
  nodeLocal: %t
  nodeTopology:
    type: cluster
    prefix: %s
    fromRegexp:
    - topologyKey: zone
      source: env
      envName: ZONE
`, connDir, nodeLocal, prefix), 0o640)
		p := launch(t, dir, processSpec{name: n, mode: "all", nodeID: n, env: []string{"ZONE=zone1"}, config: cfg})
		out = append(out, &nodeLocalNode{name: n, disk: disk, proc: p})
	}
	for _, n := range out {
		n.proc.waitReady(t)
		n.ctrl = csi.NewControllerClient(n.proc.conn)
		n.node = csi.NewNodeClient(n.proc.conn)
	}
	return out
}

// TestNodeLocalMode (SPEC §12): two nodes of the node-local mode, each the
// controller of its own disk. Every node reports <prefix>/node; a volume
// of the node-local connection is created on the disk of the node asked
// and pinned there, for the request shapes of the three StorageClass
// modes; ControllerGetVolume and ListVolumes report the same pin; a
// controller asked for the other node refuses with RESOURCE_EXHAUSTED
// naming the connection and the node; a shared base path declared with
// topology is not pinned.
func TestNodeLocalMode(t *testing.T) {
	nodes := startNodeLocalNodes(t, true, "nl-node-1", "nl-node-2")
	n1, n2 := nodes[0], nodes[1]
	nodeKey := prefix + "/node"
	term := func(n string) *csi.Topology {
		return &csi.Topology{Segments: map[string]string{prefix + "/cluster": "local", zoneKey: "zone1", nodeKey: n}}
	}
	for _, n := range nodes {
		info, err := n.node.NodeGetInfo(callCtx(t), &csi.NodeGetInfoRequest{})
		if err != nil {
			t.Fatal(err)
		}
		want := &csi.NodeGetInfoResponse{NodeId: n.name, AccessibleTopology: term(n.name)}
		if d := cmp.Diff(want, info, protocmp.Transform()); d != "" {
			t.Errorf("NodeGetInfo on %s (-want +got):\n%s", n.name, d)
		}
	}
	pin := func(n string) []*csi.Topology { return []*csi.Topology{{Segments: map[string]string{nodeKey: n}}} }
	zone1 := []*csi.Topology{{Segments: map[string]string{zoneKey: "zone1"}}}
	for i, tc := range []struct {
		name, conn string
		on         *nodeLocalNode
		req        *csi.TopologyRequirement
		want       []*csi.Topology
		// existing is what ControllerGetVolume and ListVolumes report when
		// it is not want: the connection's whole topology (SPEC §8).
		existing []*csi.Topology
		refused  []string // RESOURCE_EXHAUSTED message parts
	}{
		{name: "no requirement (Immediate)", conn: "disk", on: n1, want: pin(n1.name)},
		{name: "Immediate, --immediate-topology=true: one term per node", conn: "disk", on: n2, want: pin(n2.name),
			req: &csi.TopologyRequirement{Requisite: []*csi.Topology{term(n1.name), term(n2.name)}, Preferred: []*csi.Topology{term(n1.name), term(n2.name)}}},
		{name: "allowedTopologies zone1", conn: "disk", on: n1, want: pin(n1.name),
			req: &csi.TopologyRequirement{Requisite: zone1}},
		{name: "strict WaitForFirstConsumer, selected node", conn: "disk", on: n2, want: pin(n2.name),
			req: &csi.TopologyRequirement{Requisite: []*csi.Topology{term(n2.name)}, Preferred: []*csi.Topology{term(n2.name)}}},
		{name: "strict WaitForFirstConsumer, another node", conn: "disk", on: n1,
			req:     &csi.TopologyRequirement{Requisite: []*csi.Topology{term(n2.name)}, Preferred: []*csi.Topology{term(n2.name)}},
			refused: []string{`connection "disk"`, `runs on node "nl-node-1"`, `asked for node "nl-node-2"`}},
		// Narrowed by the term's cluster key (SPEC §8), never by its node.
		{name: "shared base path with topology, strict on another node", conn: "shared", on: n1,
			want:     []*csi.Topology{{Segments: map[string]string{prefix + "/cluster": "local", zoneKey: "zone1"}}},
			existing: zone1,
			req:      &csi.TopologyRequirement{Requisite: []*csi.Topology{term(n2.name)}, Preferred: []*csi.Topology{term(n2.name)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := tc.on.ctrl.CreateVolume(callCtx(t), &csi.CreateVolumeRequest{
				Name: fmt.Sprintf("nodelocal-%d", i), Parameters: map[string]string{"connection": tc.conn},
				VolumeCapabilities: []*csi.VolumeCapability{mountCapability()}, AccessibilityRequirements: tc.req,
			})
			if tc.refused != nil {
				if status.Code(err) != codes.ResourceExhausted {
					t.Fatalf("CreateVolume: %v, want RESOURCE_EXHAUSTED", err)
				}
				for _, m := range tc.refused {
					if !strings.Contains(status.Convert(err).Message(), m) {
						t.Errorf("message %q lacks %q", status.Convert(err).Message(), m)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			vol := resp.GetVolume()
			if d := cmp.Diff(tc.want, vol.GetAccessibleTopology(), protocmp.Transform()); d != "" {
				t.Errorf("CreateVolume accessible_topology (-want +got):\n%s", d)
			}
			existing := tc.want
			if tc.existing != nil {
				existing = tc.existing
			}
			got, err := tc.on.ctrl.ControllerGetVolume(callCtx(t), &csi.ControllerGetVolumeRequest{VolumeId: vol.GetVolumeId()})
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(existing, got.GetVolume().GetAccessibleTopology(), protocmp.Transform()); d != "" {
				t.Errorf("ControllerGetVolume accessible_topology (-want +got):\n%s", d)
			}
			list, err := tc.on.ctrl.ListVolumes(callCtx(t), &csi.ListVolumesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			listed := false
			for _, e := range list.GetEntries() {
				if e.GetVolume().GetVolumeId() == vol.GetVolumeId() {
					listed = true
					if d := cmp.Diff(existing, e.GetVolume().GetAccessibleTopology(), protocmp.Transform()); d != "" {
						t.Errorf("ListVolumes accessible_topology (-want +got):\n%s", d)
					}
				}
			}
			if !listed {
				t.Errorf("ListVolumes on %s lacks %s", tc.on.name, vol.GetVolumeId())
			}
			if tc.conn == "disk" {
				// The directory is on the disk of the node it is pinned to,
				// and nowhere else.
				for _, n := range nodes {
					entries := volumesIn(t, n.disk)
					if has := len(entries) > 0; has != (n == tc.on) {
						t.Errorf("%s's disk holds %d volumes", n.name, len(entries))
					}
				}
			}
			if _, err := tc.on.ctrl.DeleteVolume(callCtx(t), &csi.DeleteVolumeRequest{VolumeId: vol.GetVolumeId()}); err != nil {
				t.Errorf("DeleteVolume: %v", err)
			}
		})
	}
}

// TestNodeLocalKeyWithoutMode: a node plugin not in node-local mode still
// reports <prefix>/node while a node-local connection exists when it
// starts, so the volumes pinned by it can be used on that node.
func TestNodeLocalKeyWithoutMode(t *testing.T) {
	n := startNodeLocalNodes(t, false, "nl-node-3")[0]
	info, err := n.node.NodeGetInfo(callCtx(t), &csi.NodeGetInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := info.GetAccessibleTopology().GetSegments()[prefix+"/node"]; got != n.name {
		t.Errorf("NodeGetInfo segments %v: want %s/node=%s", info.GetAccessibleTopology().GetSegments(), prefix, n.name)
	}
}
