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
			existing, err := p.Existing(tc.t, nil)
			if err != nil {
				t.Fatalf("Existing: %v", err)
			}
			if diff := cmp.Diff(tc.existing, existing.Topologies(), protocmp.Transform()); diff != "" {
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
	if d, err := (Placement{}).Existing(mapped, nil); err != nil || !d.Everywhere() {
		t.Errorf("Existing without a host = %v (%v), want nothing to pin to", d.Topologies(), err)
	}
}

// TestPlacementExisting (SPEC §8, §13): an existing volume's upstream
// answer is reported translated; one that does not translate is never
// widened: a node-local connection reports its node, one with a topology
// list that list, and a mapped connection with neither has nothing true
// to report (an UntranslatedError without fallback).
func TestPlacementExisting(t *testing.T) {
	p := Placement{Host: Host{Name: "n1", Segments: kvs(pk("zone"), "z1", pk("node"), "n1")}}
	zonal := map[string]string{fakeZone: "zone"}
	bad := topos(topo("other.example.com/x", "y"))
	for _, tc := range []struct {
		name     string
		spec     Spec
		upstream []*csi.Topology
		want     []*csi.Topology
		err      string // "" none, "fallback", "none"
		host     *Host  // instead of p's
	}{
		{name: "node-local, translated", spec: Spec{Upstream: map[string]string{dcsiNode: "node"}},
			upstream: topos(topo(dcsiNode, "n7")), want: topos(topo(pk("node"), "n7"))},
		{name: "node-local, untranslatable: the node", spec: Spec{Upstream: map[string]string{dcsiNode: "node"}},
			upstream: bad, want: topos(topo(pk("node"), "n1")), err: "fallback"},
		{name: "zonal, translated", spec: Spec{Upstream: zonal},
			upstream: topos(topo(fakeZone, "z2")), want: topos(zoneTerm("z2"))},
		{name: "zonal with a list, untranslatable: the list", spec: Spec{Upstream: zonal, Entries: []Entry{zoneEntry("z2")}},
			upstream: bad, want: topos(zoneTerm("z2")), err: "fallback"},
		{name: "zonal with a list, an empty term: the list", spec: Spec{Upstream: zonal, Entries: []Entry{zoneEntry("z2")}},
			upstream: topos(&csi.Topology{}), want: topos(zoneTerm("z2")), err: "fallback"},
		{name: "zonal without a list, untranslatable: nothing", spec: Spec{Upstream: zonal}, upstream: bad, err: "none"},
		{name: "zonal without a list, nothing answered: everywhere", spec: Spec{Upstream: zonal}},
		{name: "node-local without a node name, untranslatable: nothing", spec: Spec{Upstream: map[string]string{dcsiNode: "node"}},
			upstream: bad, err: "none", host: &Host{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := p
			if tc.host != nil {
				p.Host = *tc.host
			}
			d, err := p.Existing(CompileSpec(tc.spec, zoneOpts), tc.upstream)
			var ue UntranslatedError
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("Existing: %v", err)
			case tc.err != "" && !errors.As(err, &ue):
				t.Fatalf("Existing: err %v, want an UntranslatedError", err)
			case tc.err != "" && ue.Fallback != (tc.err == "fallback"):
				t.Fatalf("Existing: fallback %v, want %s (%v)", ue.Fallback, tc.err, err)
			}
			if tc.err == "none" {
				if !strings.Contains(err.Error(), "declares no proxy.perDriver.topology") {
					t.Errorf("message %q does not say why nothing is reported", err)
				}
				return
			}
			if diff := cmp.Diff(tc.want, d.Topologies(), protocmp.Transform()); diff != "" {
				t.Errorf("Existing (-want +got):\n%s", diff)
			}
		})
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
