package accessible

import (
	"fmt"
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
)

type decideCase struct {
	name    string
	req     *csi.TopologyRequirement
	entries []Entry
	opts    Options
	want    []*csi.Topology
	// wantMsg, when set, is the exact RESOURCE_EXHAUSTED message expected.
	wantMsg string
	// wantErr, when set, is the code of another error expected.
	wantErr codes.Code
}

func runDecideCases(t *testing.T, cases []decideCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decide("c1", tc.req, tc.entries, tc.opts)
			if tc.wantErr != codes.OK {
				if code := status.Code(err); code != tc.wantErr {
					t.Fatalf("code = %v (err %v), want %v", code, err, tc.wantErr)
				}
				return
			}
			if tc.wantMsg != "" {
				if code := status.Code(err); code != codes.ResourceExhausted {
					t.Fatalf("code = %v (err %v), want ResourceExhausted", code, err)
				}
				if msg := status.Convert(err).Message(); msg != tc.wantMsg {
					t.Errorf("message:\n got %s\nwant %s", msg, tc.wantMsg)
				}
				if got != nil {
					t.Errorf("topology = %v on error, want nil", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("accessible_topology (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	z123 := []Entry{zoneEntry("z1"), zoneEntry("z2"), zoneEntry("z3")}
	runDecideCases(t, []decideCase{
		{
			name: "nil requirement returns decorated T",
			req:  nil,
			entries: []Entry{
				{Requirements: kvs("zone", "z1"), Extra: kvs("custom.io/rack", "r1")},
				zoneEntry("z2"),
			},
			opts: zoneOpts,
			want: topos(topo(pk("zone"), "z1", "custom.io/rack", "r1"), zoneTerm("z2")),
		},
		{
			name:    "empty requisite and preferred are no requirement",
			req:     &csi.TopologyRequirement{Requisite: []*csi.Topology{}, Preferred: []*csi.Topology{}},
			entries: []Entry{zoneEntry("z1")},
			opts:    zoneOpts,
			want:    topos(zoneTerm("z1")),
		},
		{
			name:    "single requisite term picks the matching entry",
			req:     &csi.TopologyRequirement{Requisite: topos(zoneTerm("z2"))},
			entries: z123,
			opts:    zoneOpts,
			want:    topos(zoneTerm("z2")),
		},
		{
			name:    "one of several requisite terms matching is enough",
			req:     &csi.TopologyRequirement{Requisite: topos(zoneTerm("z4"), zoneTerm("z3"), zoneTerm("z2"))},
			entries: z123,
			opts:    zoneOpts,
			// No preferred terms: T order.
			want: topos(zoneTerm("z2"), zoneTerm("z3")),
		},
		{
			name:    "requisite only without a match",
			req:     &csi.TopologyRequirement{Requisite: topos(zoneTerm("z3"))},
			entries: []Entry{zoneEntry("z1"), zoneEntry("z2")},
			opts:    zoneOpts,
			wantMsg: `topology {org.democratic-csi.topology/zone=z3} (requisite) is not accessible for connection "c1" (it offers [{org.democratic-csi.topology/zone=z1}, {org.democratic-csi.topology/zone=z2}])`,
		},
		{
			name:    "several requisite terms without a match",
			req:     &csi.TopologyRequirement{Requisite: topos(zoneTerm("z3"), zoneTerm("z4"))},
			entries: []Entry{zoneEntry("z1")},
			opts:    zoneOpts,
			wantMsg: `none of the topologies [{org.democratic-csi.topology/zone=z3}, {org.democratic-csi.topology/zone=z4}] (requisite) is accessible for connection "c1" (it offers [{org.democratic-csi.topology/zone=z1}])`,
		},
		{
			name:    "preferred only are the terms, in preferred order",
			req:     &csi.TopologyRequirement{Preferred: topos(zoneTerm("z3"), zoneTerm("z1"))},
			entries: z123,
			opts:    zoneOpts,
			want:    topos(zoneTerm("z3"), zoneTerm("z1")),
		},
		{
			name:    "preferred only without a match names preferred",
			req:     &csi.TopologyRequirement{Preferred: topos(zoneTerm("z9"))},
			entries: []Entry{zoneEntry("z1")},
			opts:    zoneOpts,
			wantMsg: `topology {org.democratic-csi.topology/zone=z9} (preferred) is not accessible for connection "c1" (it offers [{org.democratic-csi.topology/zone=z1}])`,
		},
		{
			name: "preferred orders the matches, the rest follow in T order",
			req: &csi.TopologyRequirement{
				Requisite: topos(zoneTerm("z1"), zoneTerm("z2"), zoneTerm("z3"), zoneTerm("z4")),
				Preferred: topos(zoneTerm("z4"), zoneTerm("z3")),
			},
			entries: []Entry{zoneEntry("z1"), zoneEntry("z2"), zoneEntry("z3"), zoneEntry("z4")},
			opts:    zoneOpts,
			want:    topos(zoneTerm("z4"), zoneTerm("z3"), zoneTerm("z1"), zoneTerm("z2")),
		},
		{
			name: "entries matching the same preferred term keep T order",
			req: &csi.TopologyRequirement{
				Requisite: topos(topo(pk("region"), "r1")),
				Preferred: topos(topo(pk("region"), "r1")),
			},
			entries: []Entry{
				{Requirements: kvs("region", "r1", "zone", "z2")},
				{Requirements: kvs("region", "r1", "zone", "z1")},
			},
			opts: zoneOpts,
			want: topos(topo(pk("region"), "r1", pk("zone"), "z2"), topo(pk("region"), "r1", pk("zone"), "z1")),
		},
		{
			name: "preferred term outside requisite only orders, never admits",
			req: &csi.TopologyRequirement{
				Requisite: topos(zoneTerm("z1")),
				Preferred: topos(zoneTerm("z2")),
			},
			entries: []Entry{zoneEntry("z2"), zoneEntry("z1")},
			opts:    zoneOpts,
			want:    topos(zoneTerm("z1")),
		},
		{
			// SPEC §8: the PV must never admit a node that no term admits,
			// so keys the entry does not constrain narrow the result; the
			// node key never does (zone-wide storage is not pinned).
			name: "term keys the entry lacks narrow the result, except the node key",
			req: &csi.TopologyRequirement{Requisite: topos(
				topo(pk("zone"), "z1", pk("node"), "n7", "topology.kubernetes.io/region", "eu"),
			)},
			entries: []Entry{zoneEntry("z1"), zoneEntry("z2")},
			opts:    zoneOpts,
			want:    topos(topo(pk("zone"), "z1", "topology.kubernetes.io/region", "eu")),
		},
		{
			name:    "entry keys the term lacks are not asked about",
			req:     &csi.TopologyRequirement{Requisite: topos(topo(pk("region"), "r1"))},
			entries: []Entry{{Requirements: kvs("region", "r1", "zone", "z1")}, {Requirements: kvs("region", "r2", "zone", "z1")}},
			opts:    zoneOpts,
			want:    topos(topo(pk("region"), "r1", pk("zone"), "z1")),
		},
		{
			name:    "no shared keys matches",
			req:     &csi.TopologyRequirement{Requisite: topos(topo(pk("node"), "n1"))},
			entries: []Entry{zoneEntry("z1")},
			opts:    zoneOpts,
			want:    topos(zoneTerm("z1")),
		},
		{
			name:    "empty term matches everything",
			req:     &csi.TopologyRequirement{Requisite: topos(&csi.Topology{}, nil)},
			entries: []Entry{zoneEntry("z1")},
			opts:    zoneOpts,
			want:    topos(zoneTerm("z1")),
		},
		{
			name: "verbatim keys match verbatim and stay unprefixed",
			req:  &csi.TopologyRequirement{Requisite: topos(topo("topology.kubernetes.io/zone", "eu-1b"))},
			entries: []Entry{
				{Requirements: kvs("topology.kubernetes.io/zone", "eu-1a")},
				{Requirements: kvs("topology.kubernetes.io/zone", "eu-1b")},
			},
			opts: zoneOpts,
			want: topos(topo("topology.kubernetes.io/zone", "eu-1b")),
		},
		{
			name:    "a/zone and b/zone do not collide",
			req:     &csi.TopologyRequirement{Requisite: topos(topo("b/zone", "z2"))},
			entries: []Entry{{Requirements: kvs("a/zone", "z1")}},
			opts:    zoneOpts,
			// b/zone is a key the entry has no requirement for: it
			// matches, and narrows.
			want: topos(topo("a/zone", "z1", "b/zone", "z2")),
		},
		{
			name:    "a/zone is compared in full",
			req:     &csi.TopologyRequirement{Requisite: topos(topo("a/zone", "z2"))},
			entries: []Entry{{Requirements: kvs("a/zone", "z1")}},
			opts:    zoneOpts,
			wantMsg: `topology {a/zone=z2} (requisite) is not accessible for connection "c1" (it offers [{a/zone=z1}])`,
		},
		{
			name:    "request keys from another prefix are not stripped",
			req:     &csi.TopologyRequirement{Requisite: topos(topo("other.io/zone", "z2"))},
			entries: []Entry{zoneEntry("z1")},
			opts:    zoneOpts,
			want:    topos(topo(pk("zone"), "z1", "other.io/zone", "z2")),
		},
		{
			name:    "unprefixed request keys are not prefixed",
			req:     &csi.TopologyRequirement{Requisite: topos(topo("zone", "z2"))},
			entries: []Entry{zoneEntry("z1")},
			opts:    zoneOpts,
			want:    topos(topo(pk("zone"), "z1", "zone", "z2")),
		},
		{
			name:    "empty prefix leaves short keys as they are",
			req:     &csi.TopologyRequirement{Requisite: topos(topo("zone", "z2"))},
			entries: []Entry{zoneEntry("z1"), zoneEntry("z2")},
			opts:    Options{Type: "zone"},
			want:    topos(topo("zone", "z2")),
		},
		{
			name: "extra labels are added",
			req:  &csi.TopologyRequirement{Requisite: topos(zoneTerm("z1"))},
			entries: []Entry{
				{Requirements: kvs("zone", "z1"), Extra: kvs("custom.io/rack", "r1")},
			},
			opts: zoneOpts,
			want: topos(topo(pk("zone"), "z1", "custom.io/rack", "r1")),
		},
		{
			// Extra labels are not matched on, but a term that contradicts
			// one admits no node the volume could be used from.
			name: "a term contradicting an extra label is not served",
			req:  &csi.TopologyRequirement{Requisite: topos(topo(pk("zone"), "z1", "custom.io/rack", "other"))},
			entries: []Entry{
				{Requirements: kvs("zone", "z1"), Extra: kvs("custom.io/rack", "r1")},
			},
			opts:    zoneOpts,
			wantMsg: `topology {custom.io/rack=other, org.democratic-csi.topology/zone=z1} (requisite) is not accessible for connection "c1" (it offers [{org.democratic-csi.topology/zone=z1}])`,
		},
		{
			name:    "extra-only entry matches every term",
			req:     &csi.TopologyRequirement{Requisite: topos(zoneTerm("z9"))},
			entries: []Entry{{Extra: kvs("custom.io/storage", "fast")}},
			opts:    zoneOpts,
			want:    topos(topo("custom.io/storage", "fast", pk("zone"), "z9")),
		},
		{
			name: "exact duplicates are dropped, first kept",
			req: &csi.TopologyRequirement{
				Requisite: topos(zoneTerm("z1"), zoneTerm("z2")),
				Preferred: topos(zoneTerm("z2"), zoneTerm("z1")),
			},
			entries: []Entry{
				zoneEntry("z1"),
				{Requirements: kvs(pk("zone"), "z2")},
				{Requirements: kvs(pk("zone"), "z1")}, // same labels as entry 0
				zoneEntry("z2"),                       // same labels as entry 1
				{Requirements: kvs("zone", "z1"), Extra: kvs("custom.io/rack", "r1")},
			},
			opts: zoneOpts,
			want: topos(zoneTerm("z2"), zoneTerm("z1"), topo(pk("zone"), "z1", "custom.io/rack", "r1")),
		},
		{
			name:    "an entry without labels is narrowed to the term",
			req:     &csi.TopologyRequirement{Requisite: topos(zoneTerm("z1"))},
			entries: []Entry{zoneEntry("z1"), {}},
			opts:    zoneOpts,
			want:    topos(zoneTerm("z1")),
		},
		{
			name:    "an entry without labels and a term of the node key only: everywhere",
			req:     &csi.TopologyRequirement{Requisite: topos(topo(pk("node"), "n1"))},
			entries: []Entry{{}},
			opts:    nodeOpts,
			want:    nil,
		},
		{
			name:    "colliding short and verbatim key: the verbatim key wins",
			req:     &csi.TopologyRequirement{Requisite: topos(zoneTerm("z2"))},
			entries: []Entry{{Requirements: kvs("zone", "z1", pk("zone"), "z2")}},
			opts:    zoneOpts,
			want:    topos(zoneTerm("z2")),
		},
		{
			name:    "colliding extra and requirement: the requirement wins",
			req:     &csi.TopologyRequirement{Requisite: topos(zoneTerm("z1"))},
			entries: []Entry{{Requirements: kvs("zone", "z1"), Extra: kvs(pk("zone"), "z2")}},
			opts:    zoneOpts,
			want:    topos(zoneTerm("z1")),
		},
		{
			name:    "requirements disagreeing on one of several keys",
			req:     &csi.TopologyRequirement{Requisite: topos(topo(pk("region"), "r1", pk("zone"), "z1"))},
			entries: []Entry{{Requirements: kvs("region", "r2", "zone", "z1")}, {Requirements: kvs("region", "r1", "zone", "z2")}},
			opts:    zoneOpts,
			wantMsg: `topology {org.democratic-csi.topology/region=r1, org.democratic-csi.topology/zone=z1} (requisite) is not accessible for connection "c1" (it offers [{org.democratic-csi.topology/region=r2, org.democratic-csi.topology/zone=z1}, {org.democratic-csi.topology/region=r1, org.democratic-csi.topology/zone=z2}])`,
		},
	})
}

func TestDecideEmptyT(t *testing.T) {
	nodeTerm := func(n string) *csi.Topology { return topo(pk("node"), n, pk("zone"), "z1") }
	runDecideCases(t, []decideCase{
		{
			name: "node type takes the node of the first preferred term",
			req: &csi.TopologyRequirement{
				Requisite: topos(nodeTerm("n1"), nodeTerm("n2"), nodeTerm("n3")),
				Preferred: topos(nodeTerm("n2"), nodeTerm("n3"), nodeTerm("n1")),
			},
			opts: nodeOpts,
			want: topos(topo(pk("node"), "n2")),
		},
		{
			name: "node type skips preferred terms without a node",
			req: &csi.TopologyRequirement{
				Requisite: topos(nodeTerm("n1")),
				Preferred: topos(zoneTerm("z1"), nodeTerm("n3")),
			},
			opts: nodeOpts,
			want: topos(topo(pk("node"), "n3")),
		},
		{
			name: "node type falls back to requisite",
			req: &csi.TopologyRequirement{
				Requisite: topos(zoneTerm("z1"), nodeTerm("n1")),
				Preferred: topos(zoneTerm("z1")),
			},
			opts: nodeOpts,
			want: topos(topo(pk("node"), "n1")),
		},
		{
			name: "node type ignores an empty node value",
			req:  &csi.TopologyRequirement{Requisite: topos(topo(pk("node"), ""), nodeTerm("n4"))},
			opts: nodeOpts,
			want: topos(topo(pk("node"), "n4")),
		},
		{
			// No node of ours to pin to: the terms narrow the volume
			// instead (never widen, SPEC §8).
			name: "node type ignores another prefix's node key",
			req:  &csi.TopologyRequirement{Requisite: topos(topo("other.io/node", "n1"))},
			opts: nodeOpts,
			want: topos(topo("other.io/node", "n1")),
		},
		{
			name: "node type without a node anywhere is narrowed to the terms",
			req:  &csi.TopologyRequirement{Requisite: topos(zoneTerm("z1"))},
			opts: nodeOpts,
			want: topos(zoneTerm("z1")),
		},
		{
			name: "node type without requirements",
			req:  nil,
			opts: nodeOpts,
			want: nil,
		},
		{
			// Storage reachable everywhere, but the PV must not admit a
			// node no term admits; the node key never narrows.
			name: "cluster type is narrowed to the terms, without the node key",
			req:  &csi.TopologyRequirement{Requisite: topos(nodeTerm("n1")), Preferred: topos(nodeTerm("n1"))},
			opts: clusterOpts,
			want: topos(zoneTerm("z1")),
		},
		{
			name: "allowedTopologies on a connection without a list",
			req: &csi.TopologyRequirement{
				Requisite: topos(zoneTerm("z1"), zoneTerm("z2")),
				Preferred: topos(zoneTerm("z2"), zoneTerm("z1")),
			},
			opts: zoneOpts,
			want: topos(zoneTerm("z2"), zoneTerm("z1")),
		},
		{
			name: "terms of the node key only: everywhere",
			req:  &csi.TopologyRequirement{Requisite: topos(topo(pk("node"), "n1"))},
			opts: zoneOpts,
			want: nil,
		},
		{
			name: "zone type is narrowed to the terms",
			req:  &csi.TopologyRequirement{Requisite: topos(nodeTerm("n1")), Preferred: topos(nodeTerm("n1"))},
			opts: zoneOpts,
			want: topos(zoneTerm("z1")),
		},
	})
}

// The message must stay readable with one requisite term per node in a big
// cluster and a long topology list.
func TestDecideMessageTruncation(t *testing.T) {
	const nTerms, nEntries = 5000, 7
	terms := make([]*csi.Topology, nTerms)
	for i := range terms {
		terms[i] = topo(pk("node"), fmt.Sprintf("n%04d", i), pk("zone"), "z9")
	}
	// A term with many keys is cut too.
	wide := topo(pk("zone"), "z9")
	for i := range 9 {
		wide.Segments[fmt.Sprintf("k%d.io/x", i)] = "v"
	}
	terms[1] = wide
	entries := make([]Entry, nEntries)
	for i := range entries {
		entries[i] = zoneEntry(fmt.Sprintf("z%d", i))
	}

	_, err := Decide("c1", &csi.TopologyRequirement{Requisite: terms}, entries, zoneOpts)
	if code := status.Code(err); code != codes.ResourceExhausted {
		t.Fatalf("code = %v (err %v), want ResourceExhausted", code, err)
	}
	want := `none of the topologies [` +
		`{org.democratic-csi.topology/node=n0000, org.democratic-csi.topology/zone=z9}, ` +
		`{k0.io/x=v, k1.io/x=v, k2.io/x=v, k3.io/x=v, k4.io/x=v, k5.io/x=v, k6.io/x=v, k7.io/x=v, … and 2 more}, ` +
		`{org.democratic-csi.topology/node=n0002, org.democratic-csi.topology/zone=z9}, ` +
		`{org.democratic-csi.topology/node=n0003, org.democratic-csi.topology/zone=z9}, ` +
		`{org.democratic-csi.topology/node=n0004, org.democratic-csi.topology/zone=z9}, … and 4995 more] ` +
		`(requisite) is accessible for connection "c1" (it offers [` +
		`{org.democratic-csi.topology/zone=z0}, {org.democratic-csi.topology/zone=z1}, {org.democratic-csi.topology/zone=z2}, ` +
		`{org.democratic-csi.topology/zone=z3}, {org.democratic-csi.topology/zone=z4}, … and 2 more])`
	if msg := status.Convert(err).Message(); msg != want {
		t.Errorf("message:\n got %s\nwant %s", msg, want)
	}
}

// Connection names come from file names and requests; the message quotes
// them so odd characters cannot break it up.
func TestDecideMessageQuotesConnection(t *testing.T) {
	_, err := Decide("c 1\n", &csi.TopologyRequirement{Requisite: topos(zoneTerm("z2"))}, []Entry{zoneEntry("z1")}, zoneOpts)
	if msg := status.Convert(err).Message(); !strings.Contains(msg, `for connection "c 1\n" (`) {
		t.Errorf("message %q does not quote the connection", msg)
	}
}

// Callers (the CSI layer) may edit what they get back; nothing may be
// shared with the entries or with another call's result.
func TestDecideResultIsFresh(t *testing.T) {
	entries := []Entry{{Requirements: kvs("zone", "z1"), Extra: kvs("custom.io/rack", "r1")}}
	req := &csi.TopologyRequirement{Requisite: topos(zoneTerm("z1"))}
	first, err := Decide("c1", req, entries, zoneOpts)
	if err != nil {
		t.Fatal(err)
	}
	first[0].Segments["custom.io/rack"] = "changed"
	second, err := Decide("c1", req, entries, zoneOpts)
	if err != nil {
		t.Fatal(err)
	}
	want := topos(topo(pk("zone"), "z1", "custom.io/rack", "r1"))
	if diff := cmp.Diff(want, second, protocmp.Transform()); diff != "" {
		t.Errorf("second call (-want +got):\n%s", diff)
	}
	if entries[0].Extra["custom.io/rack"] != "r1" {
		t.Errorf("entries were modified: %v", entries[0].Extra)
	}
}

func TestAll(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []Entry
		opts    Options
		want    []*csi.Topology
	}{
		{name: "nil", entries: nil, opts: zoneOpts, want: nil},
		{name: "empty", entries: []Entry{}, opts: nodeOpts, want: nil},
		{
			name: "prefixed requirements and extra",
			entries: []Entry{
				{Requirements: kvs("zone", "z1", "topology.kubernetes.io/region", "eu"), Extra: kvs("custom.io/rack", "r1")},
				{Extra: kvs("custom.io/rack", "r2")},
			},
			opts: zoneOpts,
			want: topos(
				topo(pk("zone"), "z1", "topology.kubernetes.io/region", "eu", "custom.io/rack", "r1"),
				topo("custom.io/rack", "r2"),
			),
		},
		{
			name:    "duplicates dropped",
			entries: []Entry{zoneEntry("z1"), zoneEntry("z2"), {Requirements: kvs(pk("zone"), "z1")}},
			opts:    zoneOpts,
			want:    topos(zoneTerm("z1"), zoneTerm("z2")),
		},
		{
			// "a=1" + "b" must not look like "a" + "1b" or similar.
			name: "canonical form has no separator collisions",
			entries: []Entry{
				{Extra: kvs("x.io/a", "1:2", "x.io/b", "3")},
				{Extra: kvs("x.io/a", "1", "x.io/b", "2:3")},
			},
			opts: zoneOpts,
			want: topos(topo("x.io/a", "1:2", "x.io/b", "3"), topo("x.io/a", "1", "x.io/b", "2:3")),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Compile(tc.entries, tc.opts).All().Topologies()
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("All (-want +got):\n%s", diff)
			}
		})
	}
}

// SPEC §8, "never widen": the cases the provisioner produces, from the
// three StorageClass modes and the classes that name other keys.
func TestDecideNarrowing(t *testing.T) {
	k8sZone := "topology.kubernetes.io/zone"
	runDecideCases(t, []decideCase{
		{
			// A class whose allowedTopologies uses the well-known key while
			// the connection declares the proxy's: the PV carries both, so
			// it stays inside the class's allowedTopologies.
			name:    "allowedTopologies on another key keeps the PV inside it",
			req:     &csi.TopologyRequirement{Requisite: topos(topo(k8sZone, "us-east-1a"))},
			entries: []Entry{zoneEntry("z1")},
			opts:    zoneOpts,
			want:    topos(topo(pk("zone"), "z1", k8sZone, "us-east-1a")),
		},
		{
			name: "two allowed values give two terms",
			req: &csi.TopologyRequirement{
				Requisite: topos(topo(k8sZone, "a"), topo(k8sZone, "b")),
				Preferred: topos(topo(k8sZone, "b"), topo(k8sZone, "a")),
			},
			entries: []Entry{zoneEntry("z1")},
			opts:    zoneOpts,
			want:    topos(topo(pk("zone"), "z1", k8sZone, "a"), topo(pk("zone"), "z1", k8sZone, "b")),
		},
		{
			// Strict WaitForFirstConsumer under type node: the selected
			// node's term carries its node key, which never narrows a
			// connection that declares topology.
			name:    "strict topology, type node: zone-wide storage is not pinned to the node",
			req:     &csi.TopologyRequirement{Requisite: topos(topo(pk("node"), "n1", pk("zone"), "z1")), Preferred: topos(topo(pk("node"), "n1", pk("zone"), "z1"))},
			entries: []Entry{zoneEntry("z1"), zoneEntry("z2")},
			opts:    nodeOpts,
			want:    topos(zoneTerm("z1")),
		},
		{
			// Immediate with --immediate-topology: one term per node;
			// those of one zone collapse into one topology.
			name: "one requisite term per node collapses per zone",
			req: &csi.TopologyRequirement{Requisite: topos(
				topo(pk("node"), "n1", pk("zone"), "z1"),
				topo(pk("node"), "n2", pk("zone"), "z1"),
				topo(pk("node"), "n3", pk("zone"), "z2"),
				topo(pk("node"), "n4", pk("zone"), "z3"),
			)},
			entries: []Entry{zoneEntry("z1"), zoneEntry("z2")},
			opts:    nodeOpts,
			want:    topos(zoneTerm("z1"), zoneTerm("z2")),
		},
		{
			name:    "a region the term adds narrows a zone entry",
			req:     &csi.TopologyRequirement{Requisite: topos(topo(pk("region"), "r1", pk("zone"), "z1"))},
			entries: []Entry{zoneEntry("z1")},
			opts:    zoneOpts,
			want:    topos(topo(pk("region"), "r1", pk("zone"), "z1")),
		},
		{
			name:    "a term key that is no label is refused, not copied",
			req:     &csi.TopologyRequirement{Requisite: topos(topo("bad key", "v", pk("zone"), "z1"))},
			entries: []Entry{zoneEntry("z1")},
			opts:    zoneOpts,
			wantErr: codes.InvalidArgument,
		},
	})
}
