package csi

import (
	"fmt"
	"math/rand/v2"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/democratic-csi/proxy-topology/internal/protomap"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// TestTopologyTerms checks the split of a TopologyRequirement into wire
// terms against proto.Unmarshal, repeated keys and empty terms included.
func TestTopologyTerms(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		req := &csi.TopologyRequirement{}
		for j := r.IntN(4); j > 0; j-- {
			seg := map[string]string{}
			for k := r.IntN(4); k > 0; k-- {
				seg[fmt.Sprintf("k%d", r.IntN(3))] = fmt.Sprintf("v%d", r.IntN(3))
			}
			if r.IntN(2) == 0 {
				req.Requisite = append(req.Requisite, &csi.Topology{Segments: seg})
			} else {
				req.Preferred = append(req.Preferred, &csi.Topology{Segments: seg})
			}
		}
		b, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if r.IntN(3) == 0 && len(req.Requisite) > 0 { // a repeated key inside a term
			b = protowire.AppendTag(b, 1, protowire.BytesType)
			b = protowire.AppendBytes(b, protomap.AppendEntry(protomap.AppendEntry(nil, 1, "k0", "a"), 1, "k0", "b"))
		}
		if !wireValid(b, wireTableOf((&csi.TopologyRequirement{}).ProtoReflect().Descriptor()), 0) {
			t.Fatalf("%x: not wireValid", b)
		}
		want := &csi.TopologyRequirement{}
		if err := proto.Unmarshal(b, want); err != nil {
			t.Fatal(err)
		}
		requisite, preferred := topologyTerms(b)
		for _, c := range []struct {
			wire [][]byte
			want []*csi.Topology
		}{{requisite.Wire, want.Requisite}, {preferred.Wire, want.Preferred}} {
			if len(c.wire) != len(c.want) {
				t.Fatalf("%x: %d terms, want %d", b, len(c.wire), len(c.want))
			}
			for i, w := range c.wire {
				got := &csi.Topology{}
				if err := proto.Unmarshal(w, got); err != nil || !proto.Equal(got, c.want[i]) {
					t.Fatalf("%x: term %d is %v (%v), want %v", b, i, got, err, c.want[i])
				}
			}
		}
	}
}

// TestFastPathTakesTheUsualRequest makes sure the request the
// external-provisioner sends is served by the fast path, not the fallback.
func TestFastPathTakesTheUsualRequest(t *testing.T) {
	b, _ := proto.Marshal(&csi.CreateVolumeRequest{
		Name:               "pvc-1",
		CapacityRange:      &csi.CapacityRange{RequiredBytes: 1 << 30},
		VolumeCapabilities: []*csi.VolumeCapability{{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}}, AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}},
		Parameters:         map[string]string{"connection": "c00000", "csi.storage.k8s.io/pvc/name": "p", "csi.storage.k8s.io/pvc/namespace": "n", "csi.storage.k8s.io/pv/name": "pv", "fstype": "ext4"},
		AccessibilityRequirements: &csi.TopologyRequirement{
			Requisite: []*csi.Topology{{Segments: map[string]string{"org.democratic-csi.topology/zone": "zone1"}}},
			Preferred: []*csi.Topology{{Segments: map[string]string{"org.democratic-csi.topology/zone": "zone1"}}},
		},
	})
	r, ok := parseCreateVolume(b)
	if !ok || r.name != "pvc-1" || r.connection != "c00000" || r.caps != 1 || !r.hasTopo {
		t.Fatalf("parseCreateVolume: %+v, %v", r, ok)
	}
	out := &csi.CreateVolumeRequest{}
	if err := proto.Unmarshal(r.out, out); err != nil {
		t.Fatal(err)
	}
	if _, has := out.Parameters["connection"]; has || out.AccessibilityRequirements != nil || len(out.Parameters) != 4 {
		t.Fatalf("outbound request %v", out)
	}
	s, ok := parseNodeGetVolumeStats(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "v:c/h"))
	if !ok || s.volumeID != "v:c/h" {
		t.Fatalf("parseNodeGetVolumeStats: %+v, %v", s, ok)
	}
}
