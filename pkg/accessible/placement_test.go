package accessible

import (
	"errors"
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
)

// TestPlacement: a node-local connection (the built-in driver without
// topology, or an upstream mapped to the node key) is decided, reported,
// admitted and described by the node serving the call; any other by its
// topology list (SPEC §8, §12, §13).
func TestPlacement(t *testing.T) {
	p := Placement{Host: Host{Name: "n1", Segments: kvs(pk("zone"), "z1", pk("node"), "n1")}}
	builtin := CompileSpec(Spec{Builtin: true}, zoneOpts)
	mapped := CompileSpec(Spec{Upstream: map[string]string{dcsiNode: "node"}}, zoneOpts)
	zone2 := CompileSpec(Spec{Entries: []Entry{zoneEntry("z2")}}, zoneOpts)
	everywhere := CompileSpec(Spec{}, zoneOpts)
	pin := topos(topo(pk("node"), "n1"))
	for _, tc := range []struct {
		name      string
		t         *Compiled
		requisite []*csi.Topology
		decided   []*csi.Topology
		code      codes.Code
		existing  []*csi.Topology
		admitsZ1  bool
		offers    string
	}{
		{name: "built-in node-local", t: builtin, decided: pin, existing: pin, admitsZ1: true, offers: `node "n1" only (node-local)`},
		{name: "built-in node-local, another node", t: builtin, requisite: topos(topo(pk("node"), "n2")), code: codes.ResourceExhausted,
			existing: pin, admitsZ1: true, offers: `node "n1" only (node-local)`},
		{name: "mapped node-local", t: mapped, decided: pin, existing: pin, admitsZ1: true, offers: `node "n1" only (node-local)`},
		{name: "mapped node-local, another node", t: mapped, requisite: topos(topo(pk("node"), "n2")), code: codes.ResourceExhausted,
			existing: pin, admitsZ1: true, offers: `node "n1" only (node-local)`},
		{name: "zone list", t: zone2, decided: topos(zoneTerm("z2")), existing: topos(zoneTerm("z2")), offers: "[{" + pk("zone") + "=z2}]"},
		{name: "zone list, z1 asked", t: zone2, requisite: topos(zoneTerm("z1")), code: codes.ResourceExhausted,
			existing: topos(zoneTerm("z2")), offers: "[{" + pk("zone") + "=z2}]"},
		{name: "everywhere", t: everywhere, admitsZ1: true, offers: "every node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := p.Decide("c", tc.t, tc.requisite, nil)
			if got := status.Code(err); got != tc.code {
				t.Fatalf("Decide: code %v (%v), want %v", got, err, tc.code)
			}
			if err == nil {
				if diff := cmp.Diff(tc.decided, d.Topologies(), protocmp.Transform()); diff != "" {
					t.Errorf("Decide (-want +got):\n%s", diff)
				}
			}
			if diff := cmp.Diff(tc.existing, p.Existing(tc.t, nil).Topologies(), protocmp.Transform()); diff != "" {
				t.Errorf("Existing (-want +got):\n%s", diff)
			}
			if got := p.Admits(tc.t, zoneTerm("z1")); got != tc.admitsZ1 {
				t.Errorf("Admits(z1) = %v, want %v", got, tc.admitsZ1)
			}
			if got := p.Offers(tc.t); got != tc.offers {
				t.Errorf("Offers = %q, want %q", got, tc.offers)
			}
		})
	}
	if d := (Placement{}).Existing(mapped, nil); !d.Everywhere() {
		t.Errorf("Existing without a host = %v, want nothing to pin to", d.Topologies())
	}
	// What the upstream reports of an existing volume, translated, wins
	// over the pin; an answer that does not translate falls back to it.
	if diff := cmp.Diff(topos(topo(pk("node"), "n7")), p.Existing(mapped, topos(topo(dcsiNode, "n7"))).Topologies(), protocmp.Transform()); diff != "" {
		t.Errorf("Existing with the upstream's answer (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(pin, p.Existing(mapped, topos(topo("other.example.com/x", "y"))).Topologies(), protocmp.Transform()); diff != "" {
		t.Errorf("Existing with an untranslatable answer (-want +got):\n%s", diff)
	}
}

// TestPlacementChooseMember: a group's member is chosen by Admits, so a
// node-local member takes only its node's claims; members are asked for
// only as needed, and none admitting is the refusal listing each.
func TestPlacementChooseMember(t *testing.T) {
	p := Placement{Host: Host{Name: "n1", Segments: kvs(pk("zone"), "z1")}}
	members := []*Compiled{
		CompileSpec(Spec{Upstream: map[string]string{dcsiNode: "node"}}, zoneOpts),
		CompileSpec(Spec{Entries: []Entry{zoneEntry("z2")}}, zoneOpts),
	}
	names := []string{"local", "zone2"}
	for _, tc := range []struct {
		name      string
		requisite []*csi.Topology
		member    int
		asked     int
		msg       []string
	}{
		{name: "this node's zone", requisite: topos(zoneTerm("z1")), member: 0, asked: 1},
		{name: "another zone", requisite: topos(zoneTerm("z2")), member: 1, asked: 2},
		{name: "neither", requisite: topos(zoneTerm("z3")), member: -1, asked: 2,
			msg: []string{`group "g"`, `member "local" offers node "n1" only (node-local)`, `member "zone2" offers [{` + pk("zone") + "=z2}]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := 0
			ch, err := p.ChooseMember("g", names, tc.requisite, nil, func(i int) (*Compiled, error) {
				asked++
				return members[i], nil
			})
			if tc.member < 0 {
				if status.Code(err) != codes.ResourceExhausted {
					t.Fatalf("err %v, want RESOURCE_EXHAUSTED", err)
				}
				for _, m := range tc.msg {
					if !strings.Contains(err.Error(), m) {
						t.Errorf("message %q lacks %q", err, m)
					}
				}
			} else if err != nil || ch.Member != tc.member {
				t.Fatalf("member %d (%v), want %d", ch.Member, err, tc.member)
			}
			if asked != tc.asked {
				t.Errorf("members asked %d times, want %d", asked, tc.asked)
			}
		})
	}
	boom := errors.New("member file broken")
	if _, err := p.ChooseMember("g", names, topos(zoneTerm("z2")), nil, func(i int) (*Compiled, error) {
		if i == 1 {
			return nil, boom
		}
		return members[i], nil
	}); !errors.Is(err, boom) {
		t.Errorf("a member that cannot be read: err %v, want it returned", err)
	}
}
