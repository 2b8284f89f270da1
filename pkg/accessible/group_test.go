package accessible

import (
	"errors"
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// member is one group member for the choice tables: a name and its
// topology list.
type member struct {
	name    string
	entries []Entry
}

func zones(zs ...string) []Entry {
	out := make([]Entry, len(zs))
	for i, z := range zs {
		out[i] = zoneEntry(z)
	}
	return out
}

// choose runs Choose over members and records which members it asked
// about, so the tables can check that it loads no more than it needs.
func choose(members []member, requisite, preferred []*csi.Topology) (Choice, bool, []int) {
	compiled := make([]*Compiled, len(members))
	for i, m := range members {
		compiled[i] = Compile(m.entries, zoneOpts)
	}
	var asked []int
	ch, ok, _ := Choose(len(members), func(i int, term *csi.Topology) (bool, error) {
		if len(asked) == 0 || asked[len(asked)-1] != i {
			asked = append(asked, i)
		}
		return compiled[i].Admits(term), nil
	}, requisite, preferred)
	return ch, ok, asked
}

// TestChooseMember is SPEC §11's member choice: for each preferred term in
// order, then each requisite term, the first member in members order
// whose topology admits the term; no requirements, the first member.
func TestChooseMember(t *testing.T) {
	three := []member{{"z1", zones("zone1")}, {"z2", zones("zone2")}, {"z3", zones("zone3")}}
	for _, tc := range []struct {
		name                 string
		members              []member
		requisite, preferred []*csi.Topology
		want                 Choice
		wantOK               bool
		explain              string
	}{
		{
			name: "no requirements: the first member", members: three,
			want: Choice{Member: 0}, wantOK: true,
			explain: `no requirements: the first member, "z1"`,
		},
		{
			// Strict WaitForFirstConsumer: requisite = preferred = the
			// selected node's topology.
			name: "strict term of zone2", members: three,
			requisite: topos(zoneTerm("zone2")), preferred: topos(zoneTerm("zone2")),
			want: Choice{Member: 1, Kind: KindPreferred, Term: 0, Declined: []int{0}}, wantOK: true,
			explain: `preferred term 0 {org.democratic-csi.topology/zone=zone2}: member "z1" does not admit it, member "z2" does`,
		},
		{
			// Immediate with --immediate-topology: every zone requisite,
			// preferred rotated per claim; the first preferred decides.
			name: "preferred order decides", members: three,
			requisite: topos(zoneTerm("zone1"), zoneTerm("zone2"), zoneTerm("zone3")),
			preferred: topos(zoneTerm("zone3"), zoneTerm("zone1"), zoneTerm("zone2")),
			want:      Choice{Member: 2, Kind: KindPreferred, Term: 0, Declined: []int{0, 1}}, wantOK: true,
		},
		{
			name: "a later preferred term when no member admits the first", members: three,
			requisite: topos(zoneTerm("zone9"), zoneTerm("zone2")),
			preferred: topos(zoneTerm("zone9"), zoneTerm("zone2")),
			want:      Choice{Member: 1, Kind: KindPreferred, Term: 1, Declined: []int{0}}, wantOK: true,
		},
		{
			name: "requisite fallback when no preferred term is admitted", members: three,
			requisite: topos(zoneTerm("zone9"), zoneTerm("zone3")),
			preferred: topos(zoneTerm("zone9")),
			want:      Choice{Member: 2, Kind: KindRequisite, Term: 1, Declined: []int{0, 1}}, wantOK: true,
			explain: `requisite term 1 {org.democratic-csi.topology/zone=zone3} (no member admits any preferred term): member "z1" does not admit it, member "z2" does not admit it, member "z3" does`,
		},
		{
			name: "preferred without requisite", members: three,
			preferred: topos(zoneTerm("zone3")),
			want:      Choice{Member: 2, Kind: KindPreferred, Term: 0, Declined: []int{0, 1}}, wantOK: true,
		},
		{
			name: "requisite without preferred (allowedTopologies)", members: three,
			requisite: topos(zoneTerm("zone2"), zoneTerm("zone3")),
			want:      Choice{Member: 1, Kind: KindRequisite, Term: 0, Declined: []int{0}}, wantOK: true,
		},
		{
			// Overlapping members: both serve zone2; members order
			// decides, whatever else the first offers.
			name:      "overlapping members: the first in members order",
			members:   []member{{"z12", zones("zone1", "zone2")}, {"z2", zones("zone2")}},
			requisite: topos(zoneTerm("zone2")), preferred: topos(zoneTerm("zone2")),
			want: Choice{Member: 0, Kind: KindPreferred, Term: 0}, wantOK: true,
		},
		{
			name:      "overlapping members: a term only the second serves",
			members:   []member{{"z12", zones("zone1", "zone2")}, {"z23", zones("zone2", "zone3")}},
			requisite: topos(zoneTerm("zone3")), preferred: topos(zoneTerm("zone3")),
			want: Choice{Member: 1, Kind: KindPreferred, Term: 0, Declined: []int{0}}, wantOK: true,
		},
		{
			name:      "a member without topology, last: the fallback",
			members:   []member{{"z1", zones("zone1")}, {"anywhere", nil}},
			requisite: topos(zoneTerm("zone2")), preferred: topos(zoneTerm("zone2")),
			want: Choice{Member: 1, Kind: KindPreferred, Term: 0, Declined: []int{0}}, wantOK: true,
		},
		{
			name:      "a member without topology, last: not chosen for a zone another serves",
			members:   []member{{"z1", zones("zone1")}, {"anywhere", nil}},
			requisite: topos(zoneTerm("zone1")), preferred: topos(zoneTerm("zone1")),
			want: Choice{Member: 0, Kind: KindPreferred, Term: 0}, wantOK: true,
		},
		{
			// Why check warns about it: it admits every term.
			name:      "a member without topology, first: takes everything",
			members:   []member{{"anywhere", nil}, {"z1", zones("zone1")}},
			requisite: topos(zoneTerm("zone1")), preferred: topos(zoneTerm("zone1")),
			want: Choice{Member: 0, Kind: KindPreferred, Term: 0}, wantOK: true,
		},
		{
			// A term carrying keys the members do not constrain (the
			// node's cluster and region) is still admitted by zone.
			name: "a node's full term", members: three,
			requisite: topos(topo(pk("cluster"), "local", pk("region"), "r1", pk("zone"), "zone3")),
			preferred: topos(topo(pk("cluster"), "local", pk("region"), "r1", pk("zone"), "zone3")),
			want:      Choice{Member: 2, Kind: KindPreferred, Term: 0, Declined: []int{0, 1}}, wantOK: true,
		},
		{
			name:      "a term contradicting a member's extra label is not admitted by it",
			members:   []member{{"a", []Entry{{Requirements: kvs("zone", "zone1"), Extra: kvs("example.com/array", "a")}}}, {"b", zones("zone1")}},
			requisite: topos(topo(pk("zone"), "zone1", "example.com/array", "b")),
			want:      Choice{Member: 1, Kind: KindRequisite, Term: 0, Declined: []int{0}}, wantOK: true,
		},
		{
			name: "none admitting", members: three,
			requisite: topos(zoneTerm("zone8"), zoneTerm("zone9")), preferred: topos(zoneTerm("zone9")),
			want: Choice{Member: -1}, wantOK: false,
			explain: "no member admits any term",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, asked := choose(tc.members, tc.requisite, tc.preferred)
			if ok != tc.wantOK {
				t.Fatalf("ok = %v, want %v (choice %+v)", ok, tc.wantOK, got)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("choice (-want +got):\n%s", diff)
			}
			// When the first term decides, members after the chosen one
			// are never asked about (nor loaded).
			if ok && got.Term == 0 && (got.Kind == KindPreferred || len(tc.preferred) == 0) {
				for _, i := range asked {
					if i > got.Member {
						t.Errorf("member %d asked about, after the chosen %d", i, got.Member)
					}
				}
			}
			// A pure function: the same request chooses the same member.
			if again, _, _ := choose(tc.members, tc.requisite, tc.preferred); !cmp.Equal(again, got) {
				t.Errorf("a second call chose %+v, the first %+v", again, got)
			}
			names := make([]string, len(tc.members))
			for i, m := range tc.members {
				names[i] = m.name
			}
			if tc.explain != "" {
				if e := got.Explain(names, tc.requisite, tc.preferred); e != tc.explain {
					t.Errorf("Explain:\n got %s\nwant %s", e, tc.explain)
				}
			}
		})
	}
}

// TestChooseMemberError: a member that cannot be asked about stops the
// choice (it cannot be skipped: the result would depend on it), but only
// when the choice needs it.
func TestChooseMemberError(t *testing.T) {
	broken := errors.New("member z2 is broken")
	admits := func(i int, term *csi.Topology) (bool, error) {
		if i == 1 {
			return false, broken
		}
		return Compile(zones("zone1"), zoneOpts).Admits(term), nil
	}
	if ch, ok, err := Choose(3, admits, topos(zoneTerm("zone1")), nil); err != nil || !ok || ch.Member != 0 {
		t.Errorf("zone1 (member 0, before the broken one): %+v %v %v", ch, ok, err)
	}
	if _, _, err := Choose(3, admits, topos(zoneTerm("zone3")), nil); !errors.Is(err, broken) {
		t.Errorf("zone3 (past the broken member): error %v, want %v", err, broken)
	}
	if ch, ok, err := Choose(0, admits, nil, nil); ok || err != nil || ch.Member != -1 {
		t.Errorf("no members: %+v %v %v", ch, ok, err)
	}
}

func TestNoMemberError(t *testing.T) {
	names := []string{"z1", "z23"}
	offers := []string{Compile(zones("zone1"), zoneOpts).Offers(), Compile(zones("zone2", "zone3"), zoneOpts).Offers()}
	err := NoMemberError("zones", names, offers, topos(zoneTerm("zone9")), topos(zoneTerm("zone9")))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("code %s, want ResourceExhausted", status.Code(err))
	}
	want := `topology {org.democratic-csi.topology/zone=zone9} (requisite) is not accessible for any member of group "zones": ` +
		`member "z1" offers [{org.democratic-csi.topology/zone=zone1}]; ` +
		`member "z23" offers [{org.democratic-csi.topology/zone=zone2}, {org.democratic-csi.topology/zone=zone3}]`
	if got := status.Convert(err).Message(); got != want {
		t.Errorf("message:\n got %s\nwant %s", got, want)
	}
	err = NoMemberError("zones", names, offers, nil, topos(zoneTerm("zone8"), zoneTerm("zone9")))
	if got := status.Convert(err).Message(); !strings.HasPrefix(got, "none of the topologies [{org.democratic-csi.topology/zone=zone8}, {org.democratic-csi.topology/zone=zone9}] (preferred) is accessible for any member") {
		t.Errorf("message: %s", got)
	}
	if got := Compile(nil, zoneOpts).Offers(); got != "every node" {
		t.Errorf("Offers of an empty list: %q", got)
	}
}
