package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

// nodeOutcome is a mode 3 CreateVolume with node selected and its answer.
type nodeOutcome struct {
	node string
	want outcome
}

// strictRequirements is mode 3's requirement for a pod scheduled on node.
func strictRequirements(t *testing.T, node string, nodes []k8sNode) *csi.TopologyRequirement {
	t.Helper()
	req, err := accessibilityRequirements(claimRequest{pvcName: "claim", selectedNode: node,
		flags: provisionerFlags{strictTopology: true, immediateTopology: true}}, nodes)
	if err != nil {
		t.Fatalf("external-provisioner model: %v", err)
	}
	return req
}

// TestConnectionTopologyReload edits z1's topology while the controller
// runs and expects the very next CreateVolume to follow it: edited in place
// (same inode, same size: only the content and times change), replaced by
// rename (a new inode), and as a mounted Secret that kubelet updates by
// swapping the ..data symlink (the file name itself never changes).
func TestConnectionTopologyReload(t *testing.T) {
	c := startCluster(t)
	nodes := c.k8sNodes(t)
	file := filepath.Join(c.connDir, "z1.yaml")
	zone2 := []*csi.Topology{zoneTopology("zone2")}
	steps := []struct {
		name string
		edit func(t *testing.T)
		// want is keyed by the selected node, in call order: the first
		// call after an edit is the one that must already see it.
		want []nodeOutcome
	}{
		{
			name: "as started",
			want: []nodeOutcome{{nodeA, created(offeredZ1)}, {nodeC, exhausted}},
		},
		{
			name: "edited in place to zone2",
			edit: func(t *testing.T) {
				if err := os.WriteFile(file, []byte(csiConnection(c.endpoints["z1"], "zone2", nil)), 0o640); err != nil {
					t.Fatal(err)
				}
			},
			want: []nodeOutcome{{nodeA, exhausted}, {nodeC, created(zone2)}},
		},
		{
			name: "replaced by rename back to zone1",
			edit: func(t *testing.T) {
				tmp := filepath.Join(c.connDir, ".z1.yaml.tmp")
				if err := os.WriteFile(tmp, []byte(csiConnection(c.endpoints["z1"], "zone1", nil)), 0o640); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(tmp, file); err != nil {
					t.Fatal(err)
				}
			},
			want: []nodeOutcome{{nodeA, created(offeredZ1)}, {nodeC, exhausted}},
		},
		{
			name: "mounted Secret layout with zone2",
			edit: func(t *testing.T) {
				secretUpdate(t, c.connDir, "z1.yaml", csiConnection(c.endpoints["z1"], "zone2", nil), "..2026_01")
			},
			want: []nodeOutcome{{nodeA, exhausted}, {nodeC, created(zone2)}},
		},
		{
			// z1.yaml stays the same symlink; only ..data moves.
			name: "mounted Secret updated to zone1",
			edit: func(t *testing.T) {
				secretUpdate(t, c.connDir, "z1.yaml", csiConnection(c.endpoints["z1"], "zone1", nil), "..2026_02")
			},
			want: []nodeOutcome{{nodeA, created(offeredZ1)}, {nodeC, exhausted}},
		},
	}
	for i, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			if step.edit != nil {
				step.edit(t)
			}
			for _, w := range step.want {
				t.Run("selected="+w.node, func(t *testing.T) {
					name := "pvc-reload-" + string(rune('a'+i)) + "-" + w.node
					resp, err := c.controller.CreateVolume(callCtx(t), createRequest(name, "z1", strictRequirements(t, w.node, nodes)))
					vol, deleted := c.checkCreate(t, "z1", w.want, resp, err)
					if vol == nil {
						return
					}
					if _, err := c.controller.DeleteVolume(callCtx(t), &csi.DeleteVolumeRequest{VolumeId: vol.GetVolumeId()}); err != nil {
						t.Fatalf("DeleteVolume: %v", err)
					}
					*deleted = true
				})
			}
		})
	}
}

// secretUpdate changes file in dir the way kubelet updates a mounted
// Secret: the data goes into a new hidden generation directory, the ..data
// symlink is switched to it by rename, file is (once) made a symlink to
// ..data/file, and the previous generation is removed.
func secretUpdate(t *testing.T, dir, file, content, generation string) {
	t.Helper()
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	testkit.WriteFile(t, filepath.Join(dir, generation, file), content, 0o640)
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(generation, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, file)
	if target, err := os.Readlink(link); err != nil || target != filepath.Join("..data", file) {
		if err := os.Symlink(filepath.Join("..data", file), link+".tmp"); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(link+".tmp", link); err != nil {
			t.Fatal(err)
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConnectionRapidEdits flips z1 between zone1 and zone2 by editing the
// file in place, each edit right after a call that loaded the previous
// version. The edits keep the size and follow each other within
// milliseconds, so only the content and timestamps tell them apart.
func TestConnectionRapidEdits(t *testing.T) {
	c := startCluster(t)
	file := filepath.Join(c.connDir, "z1.yaml")
	for i := range 10 {
		zone := []string{"zone2", "zone1"}[i%2]
		t.Run(fmt.Sprintf("%d-%s", i, zone), func(t *testing.T) {
			if err := os.WriteFile(file, []byte(csiConnection(c.endpoints["z1"], zone, nil)), 0o640); err != nil {
				t.Fatal(err)
			}
			// No requirements: the answer is the connection's topology.
			resp, err := c.controller.CreateVolume(callCtx(t), createRequest(fmt.Sprintf("pvc-rapid-%d", i), "z1", nil))
			vol, deleted := c.checkCreate(t, "z1", created([]*csi.Topology{zoneTopology(zone)}), resp, err)
			if vol == nil {
				return
			}
			if _, err := c.controller.DeleteVolume(callCtx(t), &csi.DeleteVolumeRequest{VolumeId: vol.GetVolumeId()}); err != nil {
				t.Fatalf("DeleteVolume: %v", err)
			}
			*deleted = true
		})
	}
}

// TestBrokenConnectionFile breaks z1's file (invalid YAML) under running
// processes: every call for z1, controller and node side, fails with
// FAILED_PRECONDITION carrying the parse error, the other connections keep
// working, and fixing the file makes z1 work again.
func TestBrokenConnectionFile(t *testing.T) {
	c := startCluster(t)
	nodes := c.k8sNodes(t)

	// A z1 volume from before the breakage, so that calls routed by ID
	// (delete, node calls) are exercised too.
	resp, err := c.controller.CreateVolume(callCtx(t), createRequest("pvc-before-break", "z1", nil))
	z1Vol, z1Deleted := c.checkCreate(t, "z1", created(offeredZ1), resp, err)
	if z1Vol == nil {
		t.FailNow()
	}

	file := filepath.Join(c.connDir, "z1.yaml")
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	const broken = "driver: csi\ncsi:\n  endpoint: [unix:///nowhere\n"
	var v map[string]any
	parseErr := yaml.Unmarshal([]byte(broken), &v)
	if parseErr == nil {
		t.Fatal("the broken file parses")
	}
	if err := os.WriteFile(file, []byte(broken), 0o640); err != nil {
		t.Fatal(err)
	}

	staging := filepath.Join(c.dir, "kubelet", "broken", "globalmount")
	target := filepath.Join(c.dir, "kubelet", "broken", "mount")
	if err := os.MkdirAll(staging, 0o750); err != nil {
		t.Fatal(err)
	}
	cleanupMounts(t, staging, target)
	capability := mountCapability()
	id := z1Vol.GetVolumeId()

	tests := []struct {
		name string
		call func(ctx context.Context) error
		// ok: the call must succeed; otherwise FAILED_PRECONDITION with
		// the parse error.
		ok bool
	}{
		{name: "CreateVolume z1", call: func(ctx context.Context) error {
			_, err := c.controller.CreateVolume(ctx, createRequest("pvc-while-broken", "z1", strictRequirements(t, nodeA, nodes)))
			return err
		}},
		{name: "GetCapacity z1", call: func(ctx context.Context) error {
			_, err := c.controller.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: map[string]string{"connection": "z1"}})
			return err
		}},
		{name: "DeleteVolume z1 volume", call: func(ctx context.Context) error {
			_, err := c.controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
			return err
		}},
		{name: "NodeStageVolume z1 volume on node-a", call: func(ctx context.Context) error {
			_, err := c.node(t, nodeA).csi.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: capability})
			return err
		}},
		{name: "NodePublishVolume z1 volume on node-b", call: func(ctx context.Context) error {
			_, err := c.node(t, nodeB).csi.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: capability})
			return err
		}},
		{name: "CreateVolume+DeleteVolume z2", ok: true, call: func(ctx context.Context) error {
			return c.createDelete(ctx, "pvc-z2-while-z1-broken", "z2", strictRequirements(t, nodeC, nodes))
		}},
		{name: "CreateVolume+DeleteVolume all", ok: true, call: func(ctx context.Context) error {
			return c.createDelete(ctx, "pvc-all-while-z1-broken", "all", strictRequirements(t, nodeA, nodes))
		}},
		{name: "NodeStageVolume+NodeUnstageVolume z2 volume on node-c", ok: true, call: func(ctx context.Context) error {
			resp, err := c.controller.CreateVolume(ctx, createRequest("pvc-z2-stage-while-z1-broken", "z2", strictRequirements(t, nodeC, nodes)))
			if err != nil {
				return err
			}
			vid := resp.GetVolume().GetVolumeId()
			n := c.node(t, nodeC).csi
			if _, err := n.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: vid, StagingTargetPath: staging, VolumeCapability: capability}); err != nil {
				return err
			}
			if _, err := n.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: vid, StagingTargetPath: staging}); err != nil {
				return err
			}
			_, err = c.controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: vid})
			return err
		}},
		{name: "NodeGetInfo node-a", ok: true, call: func(ctx context.Context) error {
			_, err := c.node(t, nodeA).csi.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call(callCtx(t))
			if tt.ok {
				if err != nil {
					t.Fatalf("want success while z1 is broken, got %v", err)
				}
				return
			}
			if got := status.Code(err); got != codes.FailedPrecondition {
				t.Fatalf("code %s, want FailedPrecondition (error: %v)", got, err)
			}
			msg := status.Convert(err).Message()
			for _, s := range []string{parseErr.Error(), `"z1"`} {
				if !strings.Contains(msg, s) {
					t.Errorf("message %q does not contain %q", msg, s)
				}
			}
		})
	}

	t.Run("fixed file serves again", func(t *testing.T) {
		if err := os.WriteFile(file, good, 0o640); err != nil {
			t.Fatal(err)
		}
		if _, err := c.controller.DeleteVolume(callCtx(t), &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Fatalf("DeleteVolume after the fix: %v", err)
		}
		*z1Deleted = true
	})
}

// createDelete creates a volume and deletes it again.
func (c *cluster) createDelete(ctx context.Context, name, conn string, req *csi.TopologyRequirement) error {
	resp, err := c.controller.CreateVolume(ctx, createRequest(name, conn, req))
	if err != nil {
		return err
	}
	_, err = c.controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: resp.GetVolume().GetVolumeId()})
	return err
}

// TestMissingConnectionFile removes z2's file under running processes: SPEC
// §5 wants calls routed to z2, including the deletes and unpublishes that
// may otherwise succeed as no-ops, to fail with FAILED_PRECONDITION naming
// the connection, never to succeed silently and leak storage; z1 keeps
// working, and restoring the file brings z2 back.
func TestMissingConnectionFile(t *testing.T) {
	c := startCluster(t)
	resp, err := c.controller.CreateVolume(callCtx(t), createRequest("pvc-before-removal", "z2", nil))
	vol, deleted := c.checkCreate(t, "z2", created(offeredZ2), resp, err)
	if vol == nil {
		t.FailNow()
	}
	id := vol.GetVolumeId()
	file := filepath.Join(c.connDir, "z2.yaml")
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	staging := filepath.Join(c.dir, "kubelet", "missing", "globalmount")
	target := filepath.Join(c.dir, "kubelet", "missing", "mount")
	node := c.node(t, nodeC).csi

	tests := []struct {
		name string
		call func(ctx context.Context) error
		ok   bool
	}{
		{name: "CreateVolume z2", call: func(ctx context.Context) error {
			_, err := c.controller.CreateVolume(ctx, createRequest("pvc-while-missing", "z2", nil))
			return err
		}},
		{name: "DeleteVolume z2 volume", call: func(ctx context.Context) error {
			_, err := c.controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
			return err
		}},
		{name: "NodeUnpublishVolume z2 volume", call: func(ctx context.Context) error {
			_, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
			return err
		}},
		{name: "NodeUnstageVolume z2 volume", call: func(ctx context.Context) error {
			_, err := node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
			return err
		}},
		{name: "CreateVolume+DeleteVolume z1", ok: true, call: func(ctx context.Context) error {
			return c.createDelete(ctx, "pvc-z1-while-z2-missing", "z1", nil)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call(callCtx(t))
			if tt.ok {
				if err != nil {
					t.Fatalf("want success while z2 is missing, got %v", err)
				}
				return
			}
			if got := status.Code(err); got != codes.FailedPrecondition {
				t.Fatalf("code %s, want FailedPrecondition (error: %v)", got, err)
			}
			if msg := status.Convert(err).Message(); !strings.Contains(msg, `"z2"`) {
				t.Errorf("message %q does not name connection z2", msg)
			}
		})
	}

	t.Run("restored file serves again", func(t *testing.T) {
		if err := os.WriteFile(file, good, 0o640); err != nil {
			t.Fatal(err)
		}
		if _, err := c.controller.DeleteVolume(callCtx(t), &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Fatalf("DeleteVolume after restoring the file: %v", err)
		}
		*deleted = true
	})
}
