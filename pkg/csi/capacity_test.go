package csi_test

import (
	"math"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/accessible"
)

// TestGetCapacityPerSegment is what storage capacity tracking does: one
// GetCapacity per node segment and StorageClass. A connection reports its
// upstream's capacity in the zones it serves and 0 elsewhere, and an
// upstream that does not report capacity is unlimited only where it serves.
func TestGetCapacityPerSegment(t *testing.T) {
	zone := testPrefix + "/zone"
	caps := withControllerCaps(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, csi.ControllerServiceCapability_RPC_GET_CAPACITY)
	noCaps := withControllerCaps(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME)
	connections := []struct {
		name    string
		opts    []fakeOption
		entries []accessible.Entry
	}{
		{name: "two-zones", opts: []fakeOption{caps}, entries: []accessible.Entry{
			{Requirements: map[string]string{"zone": "z1"}},
			{Requirements: map[string]string{"zone": "z2"}, Extra: map[string]string{"example.com/tier": "fast"}},
		}},
		{name: "everywhere", opts: []fakeOption{caps}},
		{name: "no-capacity", opts: []fakeOption{noCaps}, entries: zoneEntries("z1")},
	}
	tests := []struct {
		name     string
		conn     string
		segment  *csi.Topology
		want     int64
		upstream bool // the upstream is asked
	}{
		{name: "z1", conn: "two-zones", segment: topo(zone, "z1"), want: 42, upstream: true},
		{name: "z2", conn: "two-zones", segment: topo(zone, "z2"), want: 42, upstream: true},
		{name: "z3 not served", conn: "two-zones", segment: topo(zone, "z3"), want: 0},
		{name: "z1 and a hostname", conn: "two-zones", segment: topo(zone, "z1", "kubernetes.io/hostname", "n1"), want: 42, upstream: true},
		{name: "z3 and another prefix's z1", conn: "two-zones", segment: topo("other.example.com/zone", "z1", zone, "z3"), want: 0},
		{name: "no segment", conn: "two-zones", segment: nil, want: 42, upstream: true},
		{name: "z3", conn: "everywhere", segment: topo(zone, "z3"), want: 42, upstream: true},
		{name: "z1 served", conn: "no-capacity", segment: topo(zone, "z1"), want: math.MaxInt64},
		{name: "z2 not served", conn: "no-capacity", segment: topo(zone, "z2"), want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.conn+"/"+tt.name, func(t *testing.T) {
			p := startProxy(t)
			fakes := map[string]*fakeUpstream{}
			for _, c := range connections {
				fakes[c.name] = newFakeUpstream(t, c.opts...)
				p.add(t, c.name, conn{Endpoint: fakes[c.name].Endpoint, Topology: c.entries})
			}
			resp, err := p.Controller.GetCapacity(callCtx(t), &csi.GetCapacityRequest{
				Parameters: map[string]string{"connection": tt.conn}, AccessibleTopology: tt.segment,
				VolumeCapabilities: []*csi.VolumeCapability{testkit.RWO()},
			})
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetAvailableCapacity() != tt.want {
				t.Errorf("available_capacity = %d, want %d", resp.GetAvailableCapacity(), tt.want)
			}
			for name, f := range fakes {
				n := len(f.requests("GetCapacity"))
				if want := name == tt.conn && tt.upstream; (n == 1) != want || n > 1 {
					t.Errorf("connection %s's upstream got %d GetCapacity calls, want it asked: %t", name, n, want)
				}
				for _, r := range f.requests("GetCapacity") {
					if r.(*csi.GetCapacityRequest).GetAccessibleTopology() != nil {
						t.Errorf("connection %s's upstream got the proxy's topology", name)
					}
				}
			}
		})
	}
}
