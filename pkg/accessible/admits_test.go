package accessible

import (
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
)

func TestAdmits(t *testing.T) {
	z1z2 := []Entry{zoneEntry("z1"), {Requirements: kvs("zone", "z2", "topology.kubernetes.io/region", "eu")}}
	for _, tc := range []struct {
		name     string
		topology *csi.Topology
		entries  []Entry
		opts     Options
		want     bool
	}{
		{name: "no entries serve everything", topology: zoneTerm("z9"), entries: nil, opts: zoneOpts, want: true},
		{name: "nil topology is served", topology: nil, entries: z1z2, opts: zoneOpts, want: true},
		{name: "empty topology is served", topology: &csi.Topology{}, entries: z1z2, opts: zoneOpts, want: true},
		{name: "matching zone", topology: zoneTerm("z2"), entries: z1z2, opts: zoneOpts, want: true},
		{name: "zone not offered", topology: zoneTerm("z3"), entries: z1z2, opts: zoneOpts, want: false},
		{name: "keys the entries lack", topology: topo(pk("node"), "n1"), entries: z1z2, opts: zoneOpts, want: true},
		{
			name:     "verbatim key disagrees",
			topology: topo(pk("zone"), "z2", "topology.kubernetes.io/region", "us"),
			entries:  z1z2,
			opts:     zoneOpts,
			want:     false,
		},
		{
			name:     "verbatim key agrees",
			topology: topo(pk("zone"), "z2", "topology.kubernetes.io/region", "eu"),
			entries:  z1z2,
			opts:     zoneOpts,
			want:     true,
		},
		{
			// Extra labels are not matched on, but no node could carry
			// both rack values (as in Decide).
			name:     "a segment contradicting an extra label",
			topology: topo(pk("zone"), "z1", "custom.io/rack", "other"),
			entries:  []Entry{{Requirements: kvs("zone", "z1"), Extra: kvs("custom.io/rack", "r1")}},
			opts:     zoneOpts,
			want:     false,
		},
		{
			name:     "extra labels are not matched on",
			topology: topo(pk("zone"), "z1", "custom.io/pool", "p1"),
			entries:  []Entry{{Requirements: kvs("zone", "z1"), Extra: kvs("custom.io/rack", "r1")}},
			opts:     zoneOpts,
			want:     true,
		},
		{name: "b/zone is not a/zone", topology: topo("b/zone", "z2"), entries: []Entry{{Requirements: kvs("a/zone", "z1")}}, opts: zoneOpts, want: true},
		{name: "a/zone compared in full", topology: topo("a/zone", "z2"), entries: []Entry{{Requirements: kvs("a/zone", "z1")}}, opts: zoneOpts, want: false},
		{name: "unprefixed key is not the short key", topology: topo("zone", "z3"), entries: z1z2, opts: zoneOpts, want: true},
		{name: "longer prefix is not the prefix", topology: topo(testPrefix+".x/zone", "z3"), entries: z1z2, opts: zoneOpts, want: true},
		{name: "empty prefix", topology: topo("zone", "z3"), entries: z1z2, opts: Options{Type: "zone"}, want: false},
		{
			name:     "verbatim key wins over the short key",
			topology: zoneTerm("z2"),
			entries:  []Entry{{Requirements: kvs("zone", "z1", pk("zone"), "z2")}},
			opts:     zoneOpts,
			want:     true,
		},
		{
			name:     "verbatim key wins over the short key, disagreeing",
			topology: zoneTerm("z1"),
			entries:  []Entry{{Requirements: kvs("zone", "z1", pk("zone"), "z2")}},
			opts:     zoneOpts,
			want:     false,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Compile(tc.entries, tc.opts).Admits(tc.topology); got != tc.want {
				t.Errorf("Admits = %v, want %v", got, tc.want)
			}
		})
	}
}

// GetCapacity may call Admits once per topology segment of a large
// cluster, on the list compiled when the connection was loaded.
func TestAdmitsDoesNotAllocate(t *testing.T) {
	c := Compile([]Entry{zoneEntry("z1"), zoneEntry("z2"), zoneEntry("z3")}, zoneOpts)
	term := topo(pk("zone"), "z3", pk("node"), "n1")
	if n := testing.AllocsPerRun(100, func() { c.Admits(term) }); n != 0 {
		t.Errorf("Admits allocates %v times per call, want 0", n)
	}
}
