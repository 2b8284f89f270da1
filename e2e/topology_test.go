package e2e

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/democratic-csi/proxy-topology/internal/testbin"
	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
)

// TestNodeGetInfo checks that each node plugin reports exactly the segment
// its rules yield: type zone adds no base segment, and the first rule with
// a value wins.
func TestNodeGetInfo(t *testing.T) {
	c := startCluster(t)
	tests := []struct {
		node string
		why  string
		want *csi.NodeGetInfoResponse
	}{
		{node: nodeA, why: "zone from the node name",
			want: &csi.NodeGetInfoResponse{NodeId: nodeA, AccessibleTopology: zoneTopology("zone1")}},
		{node: nodeB, why: "node name does not match; zone from env ZONE",
			want: &csi.NodeGetInfoResponse{NodeId: nodeB, AccessibleTopology: zoneTopology("zone1")}},
		{node: nodeC, why: "no name match, no env; zone from the host file, newline trimmed",
			want: &csi.NodeGetInfoResponse{NodeId: nodeC, AccessibleTopology: zoneTopology("zone2")}},
	}
	for _, tt := range tests {
		t.Run(tt.node, func(t *testing.T) {
			got, err := c.node(t, tt.node).csi.NodeGetInfo(callCtx(t), &csi.NodeGetInfoRequest{})
			if err != nil {
				t.Fatalf("NodeGetInfo (%s): %v", tt.why, err)
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("NodeGetInfo (%s) (-want +got):\n%s", tt.why, diff)
			}
		})
	}

	// SPEC §7: a node for which no rule yields a segment must fail
	// NodeGetInfo with FAILED_PRECONDITION saying why each rule yielded
	// nothing, so that registration fails loudly.
	t.Run("no rule yields a zone", func(t *testing.T) {
		p := c.startNodePlugin(t, "node-d", "ZONE=nowhere")
		_, err := csi.NewNodeClient(p.conn).NodeGetInfo(callCtx(t), &csi.NodeGetInfoRequest{})
		if got := status.Code(err); got != codes.FailedPrecondition {
			t.Fatalf("NodeGetInfo: code %s, want FailedPrecondition (error: %v)", got, err)
		}
		msg := status.Convert(err).Message()
		// One reason per rule: the name does not match, the env value
		// does not match, the file is missing.
		for _, s := range []string{`"node-d"`, `"nowhere"`, filepath.Join(c.dir, "hosts", "node-d", "zone")} {
			if !strings.Contains(msg, s) {
				t.Errorf("message %q does not mention %s", msg, s)
			}
		}
	})
}

// volumeName is the CSI name (the PV name) for a case and connection.
func volumeName(caseName, conn string) string {
	return "pvc-" + strings.NewReplacer("/", "-", "=", "-", ",", "-").Replace(caseName) + "-" + conn
}

// requirementsFor builds a case's accessibility_requirements from the
// cluster's nodes.
func requirementsFor(t *testing.T, mc modeCase, nodes []k8sNode) *csi.TopologyRequirement {
	t.Helper()
	req, err := accessibilityRequirements(mc.claim, nodes)
	if err != nil {
		t.Fatalf("external-provisioner model: %v", err)
	}
	if req == nil {
		t.Log("accessibility_requirements: none")
	} else {
		t.Logf("accessibility_requirements: %s", prototext.Format(req))
	}
	return req
}

// checkCreate asserts a CreateVolume answer against want and returns the
// volume when one was created; the volume is deleted at cleanup unless the
// caller marks it deleted.
func (c *cluster) checkCreate(t *testing.T, conn string, want outcome, resp *csi.CreateVolumeResponse, err error) (*csi.Volume, *bool) {
	t.Helper()
	if got := status.Code(err); got != want.code {
		t.Fatalf("CreateVolume on connection %s: code %s, want %s (error: %v)", conn, got, want.code, err)
	}
	if err != nil {
		// SPEC §8: "topology … is not accessible for connection X (it offers …)".
		msg := status.Convert(err).Message()
		for _, s := range []string{"accessible", `for connection "` + conn + `"`, "it offers"} {
			if !strings.Contains(msg, s) {
				t.Errorf("error message %q does not contain %q", msg, s)
			}
		}
		return nil, nil
	}
	vol := resp.GetVolume()
	deleted := new(bool)
	c.deleteOnCleanup(t, vol.GetVolumeId(), func() bool { return *deleted })
	if p := "v:" + conn + "/"; !strings.HasPrefix(vol.GetVolumeId(), p) || len(vol.GetVolumeId()) == len(p) {
		t.Errorf("volume_id %q: want %s<upstream handle>", vol.GetVolumeId(), p)
	}
	if diff := cmp.Diff(want.topology, vol.GetAccessibleTopology(), protocmp.Transform()); diff != "" {
		t.Errorf("accessible_topology (-want +got):\n%s", diff)
	}
	return vol, deleted
}

// TestCreateVolumeModes calls CreateVolume for every connection under every
// StorageClass mode of SPEC §9, with requirements built as the
// external-provisioner builds them from the nodes' NodeGetInfo.
func TestCreateVolumeModes(t *testing.T) {
	c := startCluster(t)
	nodes := c.k8sNodes(t)
	for _, mc := range modeCases() {
		t.Run(mc.name, func(t *testing.T) {
			req := requirementsFor(t, mc, nodes)
			for _, conn := range connections {
				t.Run(conn, func(t *testing.T) {
					resp, err := c.controller.CreateVolume(callCtx(t), createRequest(volumeName(mc.name, conn), conn, req))
					want := mc.want[conn].forRequest(req)
					vol, deleted := c.checkCreate(t, conn, want, resp, err)
					if vol == nil {
						return
					}
					// SPEC §8: ControllerGetVolume cannot know the terms
					// CreateVolume had; it reports the connection's list.
					got, err := c.controller.ControllerGetVolume(callCtx(t), &csi.ControllerGetVolumeRequest{VolumeId: vol.GetVolumeId()})
					if err != nil {
						t.Errorf("ControllerGetVolume: %v", err)
					} else if diff := cmp.Diff(connectionTopology[conn], got.GetVolume().GetAccessibleTopology(), protocmp.Transform()); diff != "" {
						t.Errorf("ControllerGetVolume accessible_topology (-want +got):\n%s", diff)
					}
					if _, err := c.controller.DeleteVolume(callCtx(t), &csi.DeleteVolumeRequest{VolumeId: vol.GetVolumeId()}); err != nil {
						t.Fatalf("DeleteVolume: %v", err)
					}
					*deleted = true
				})
			}
		})
	}
	// With --enable-capacity the provisioner asks GetCapacity once per
	// distinct node topology; SPEC §6: 0 where the connection does not
	// serve that topology.
	t.Run("GetCapacity per node topology", func(t *testing.T) {
		tests := []struct {
			conn, zone string
			zero       bool
		}{
			{"z1", "zone1", false}, {"z1", "zone2", true},
			{"z2", "zone1", true}, {"z2", "zone2", false},
			{"all", "zone1", false}, {"all", "zone2", false},
		}
		for _, tt := range tests {
			t.Run(tt.conn+"/"+tt.zone, func(t *testing.T) {
				resp, err := c.controller.GetCapacity(callCtx(t), &csi.GetCapacityRequest{
					VolumeCapabilities: []*csi.VolumeCapability{mountCapability()},
					Parameters:         map[string]string{"connection": tt.conn},
					AccessibleTopology: zoneTopology(tt.zone),
				})
				if err != nil {
					t.Fatalf("GetCapacity: %v", err)
				}
				if got := resp.GetAvailableCapacity(); (got == 0) != tt.zero {
					t.Errorf("available_capacity = %d, want zero: %t", got, tt.zero)
				}
			})
		}
	})

	// Refused calls never reached storage, and every volume is gone.
	for _, conn := range connections {
		if dirs := c.volumeDirs(t, conn); len(dirs) > 0 {
			t.Errorf("connection %s: volume directories left: %v", conn, dirs)
		}
	}
}

// TestNodeDataPath takes every volume the modes create, stages and
// publishes it on a node the volume's node affinity admits (real bind
// mounts), writes through the published path, finds the data in the
// upstream's base path, and tears everything down again.
func TestNodeDataPath(t *testing.T) {
	testbin.RequireRoot(t, "the node data path needs bind mounts (CAP_SYS_ADMIN)")
	c := startCluster(t)
	nodes := c.k8sNodes(t)
	n := 0
	for _, mc := range modeCases() {
		for _, conn := range connections {
			want := mc.want[conn]
			if want.code != codes.OK {
				continue
			}
			n++
			spread := n
			t.Run(mc.name+"/"+conn, func(t *testing.T) {
				req := requirementsFor(t, mc, nodes)
				name := volumeName(mc.name, conn)
				resp, err := c.controller.CreateVolume(callCtx(t), createRequest(name, conn, req))
				vol, deleted := c.checkCreate(t, conn, want.forRequest(req), resp, err)
				if vol == nil {
					t.FailNow()
				}
				if node := c.scheduleOn(t, mc.claim.selectedNode, vol, nodes, spread); node != nil {
					c.dataPath(t, conn, node, name, vol)
				} else if mc.want[conn].termsOfRequest {
					// Storage reachable everywhere, narrowed to a class
					// whose zones have no node here: correctly unusable.
					t.Logf("no node in %v: no pod could use the volume", vol.GetAccessibleTopology())
				} else {
					t.Fatalf("no node satisfies the node affinity %v of %s", vol.GetAccessibleTopology(), vol.GetVolumeId())
				}
				if _, err := c.controller.DeleteVolume(callCtx(t), &csi.DeleteVolumeRequest{VolumeId: vol.GetVolumeId()}); err != nil {
					t.Fatalf("DeleteVolume: %v", err)
				}
				*deleted = true
				handle := hostpath.VolumeDir(strings.TrimPrefix(vol.GetVolumeId(), "v:"+conn+"/"))
				if _, err := os.Lstat(filepath.Join(c.bases[conn], "volumes", handle)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("volume directory of %s still there after DeleteVolume (lstat: %v)", handle, err)
				}
			})
		}
	}
	for _, conn := range connections {
		if dirs := c.volumeDirs(t, conn); len(dirs) > 0 {
			t.Errorf("connection %s: volume directories left: %v", conn, dirs)
		}
	}
}

// scheduleOn picks the node a pod using vol runs on: the selected node when
// the volume's node affinity admits it (WaitForFirstConsumer), else one of
// the admitted nodes, spread over them; nil when no node is admitted.
func (c *cluster) scheduleOn(t *testing.T, selected string, vol *csi.Volume, nodes []k8sNode, spread int) *nodePlugin {
	t.Helper()
	var admitted []string
	for _, n := range nodes {
		if volumeAccessibleFrom(vol.GetAccessibleTopology(), n) {
			admitted = append(admitted, n.name)
		}
	}
	if len(admitted) == 0 {
		return nil
	}
	name := admitted[spread%len(admitted)]
	if slices.Contains(admitted, selected) {
		name = selected
	}
	t.Logf("pod runs on %s (admitted: %v)", name, admitted)
	return c.node(t, name)
}

// dataPath stages and publishes vol on node as kubelet does, writes a file
// through the published path, reads it from the storage's base path on
// disk, then unpublishes and unstages and checks the mounts are gone.
func (c *cluster) dataPath(t *testing.T, conn string, node *nodePlugin, name string, vol *csi.Volume) {
	t.Helper()
	kubelet := filepath.Join(c.dir, "kubelet", node.name)
	staging := filepath.Join(kubelet, "plugins", name, "globalmount")
	target := filepath.Join(kubelet, "pods", name, "volumes", "mount")
	// kubelet creates the staging directory and the target's parent; the
	// plugin creates the target.
	for _, d := range []string{staging, filepath.Dir(target)} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	cleanupMounts(t, staging, target)
	id := vol.GetVolumeId()

	_, err := node.csi.NodeStageVolume(callCtx(t), &csi.NodeStageVolumeRequest{
		VolumeId: id, StagingTargetPath: staging, VolumeCapability: mountCapability(), VolumeContext: vol.GetVolumeContext(),
	})
	if err != nil {
		t.Fatalf("NodeStageVolume on %s: %v", node.name, err)
	}
	// z1's upstream stages, so the proxy forwards and the staging path is a
	// bind mount; the others do not, and the proxy only pretends to stage.
	if got, want := isMounted(t, staging), c.stages[conn]; got != want {
		t.Errorf("after NodeStageVolume: staging path mounted = %t, want %t (upstream stages: %t)", got, want, c.stages[conn])
	}

	_, err = node.csi.NodePublishVolume(callCtx(t), &csi.NodePublishVolumeRequest{
		VolumeId: id, StagingTargetPath: staging, TargetPath: target,
		VolumeCapability: mountCapability(), VolumeContext: vol.GetVolumeContext(),
	})
	if err != nil {
		t.Fatalf("NodePublishVolume on %s: %v", node.name, err)
	}
	if !isMounted(t, target) {
		t.Fatalf("after NodePublishVolume: %s is not a mount point", target)
	}

	content := "written on " + node.name + " through " + target + " to " + id + "\n"
	if err := os.WriteFile(filepath.Join(target, "data.txt"), []byte(content), 0o640); err != nil {
		t.Fatalf("write through the published volume: %v", err)
	}
	// The storage side: exactly one volume directory holds the file, and it
	// is the one named by the upstream handle.
	var holders []string
	for _, d := range c.volumeDirs(t, conn) {
		if b, err := os.ReadFile(filepath.Join(c.bases[conn], "volumes", d, "data.txt")); err == nil && string(b) == content {
			holders = append(holders, d)
		}
	}
	handle := hostpath.VolumeDir(strings.TrimPrefix(id, "v:"+conn+"/"))
	if diff := cmp.Diff([]string{handle}, holders); diff != "" {
		t.Errorf("volume directories under %s/volumes holding the written file (-want +got):\n%s", c.bases[conn], diff)
	}

	if _, err := node.csi.NodeUnpublishVolume(callCtx(t), &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatalf("NodeUnpublishVolume: %v", err)
	}
	if isMounted(t, target) {
		t.Errorf("after NodeUnpublishVolume: %s is still mounted", target)
	}
	// CSI: "The SP MUST delete the file or directory it created at this path."
	if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after NodeUnpublishVolume: target %s still exists (lstat: %v)", target, err)
	}
	if _, err := node.csi.NodeUnstageVolume(callCtx(t), &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatalf("NodeUnstageVolume: %v", err)
	}
	if isMounted(t, staging) {
		t.Errorf("after NodeUnstageVolume: %s is still mounted", staging)
	}
	// The data outlives the mounts.
	if b, err := os.ReadFile(filepath.Join(c.bases[conn], "volumes", handle, "data.txt")); err != nil || string(b) != content {
		t.Errorf("after unmounting: volume data = %q, %v; want %q", b, err, content)
	}
}
