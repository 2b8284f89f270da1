package accessible

import (
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
)

const (
	fakeZone = "fake.example.com/zone"
	dcsiNode = "org.democratic-csi.topology/node"
)

// TestAnswer (SPEC §13): an upstream's accessible_topology is translated
// term by term into the proxy's keys; with a topology list every term
// must lie inside it and gets the matching entry's extra labels; the
// request's requisite keeps the terms it admits, narrowed by its other
// keys but never by the node key. Anything else is refused with a message
// that names the key, term or value.
func TestAnswer(t *testing.T) {
	zonal := map[string]string{fakeZone: "zone"}
	nodeMap := map[string]string{dcsiNode: "node"}
	withExtra := []Entry{
		{Requirements: kvs("zone", "z1")},
		{Requirements: kvs("zone", "z2"), Extra: kvs("example.com/disk", "ssd")},
	}
	for _, tc := range []struct {
		name      string
		spec      Spec
		opts      Options
		answer    []*csi.Topology
		requisite []*csi.Topology
		want      []*csi.Topology
		msg       []string // parts of the refusal
	}{
		{name: "zonal, no requirements", spec: Spec{Upstream: zonal},
			answer: topos(topo(fakeZone, "z2")), want: topos(topo(pk("zone"), "z2"))},
		{name: "zonal, two terms kept in order", spec: Spec{Upstream: zonal},
			answer: topos(topo(fakeZone, "z2"), topo(fakeZone, "z1")), want: topos(topo(pk("zone"), "z2"), topo(pk("zone"), "z1"))},
		{name: "zonal, requisite admits it", spec: Spec{Upstream: zonal}, requisite: topos(zoneTerm("z1"), zoneTerm("z2")),
			answer: topos(topo(fakeZone, "z2")), want: topos(topo(pk("zone"), "z2"))},
		{name: "zonal, requisite admits one of two terms", spec: Spec{Upstream: zonal}, requisite: topos(zoneTerm("z2")),
			answer: topos(topo(fakeZone, "z1"), topo(fakeZone, "z2")), want: topos(topo(pk("zone"), "z2"))},
		{name: "zonal, requisite outside the answer", spec: Spec{Upstream: zonal}, requisite: topos(zoneTerm("z1")),
			answer: topos(topo(fakeZone, "z2")),
			msg:    []string{"accessible_topology [{" + fakeZone + "=z2}]", pk("zone") + "=z2", "requisite [{" + pk("zone") + "=z1}]", "did not place the volume where it was asked"}},
		{name: "zonal, the requisite's other keys narrow, the node key does not", spec: Spec{Upstream: zonal}, opts: nodeOpts,
			requisite: topos(topo(pk("zone"), "z2", "topology.kubernetes.io/zone", "eu-1b", pk("node"), "n7")),
			answer:    topos(topo(fakeZone, "z2")),
			want:      topos(topo(pk("zone"), "z2", "topology.kubernetes.io/zone", "eu-1b"))},
		{name: "declared topology: extra added where an entry matches", spec: Spec{Upstream: zonal, Entries: withExtra},
			answer: topos(topo(fakeZone, "z2")), want: topos(topo(pk("zone"), "z2", "example.com/disk", "ssd"))},
		{name: "declared topology: a term outside it", spec: Spec{Upstream: zonal, Entries: withExtra},
			answer: topos(topo(fakeZone, "z1"), topo(fakeZone, "z3")),
			msg:    []string{"accessible_topology[1] {" + fakeZone + "=z3}", pk("zone") + "=z3", "outside what proxy.perDriver.topology declares"}},
		{name: "node-local: the node key", spec: Spec{Upstream: nodeMap},
			answer: topos(topo(dcsiNode, "n1")), want: topos(topo(pk("node"), "n1"))},
		{name: "node-local: the node asked for", spec: Spec{Upstream: nodeMap},
			requisite: topos(topo(pk("zone"), "z1", pk("node"), "n1")),
			answer:    topos(topo(dcsiNode, "n1")), want: topos(topo(pk("node"), "n1", pk("zone"), "z1"))},
		{name: "node-local: another node than asked", spec: Spec{Upstream: nodeMap},
			requisite: topos(topo(pk("node"), "n2")), answer: topos(topo(dcsiNode, "n1")),
			msg: []string{"{" + dcsiNode + "=n1}", "requisite [{" + pk("node") + "=n2}]"}},
		{name: "zonal, an empty term", spec: Spec{Upstream: zonal},
			answer: topos(&csi.Topology{}),
			msg:    []string{"the upstream answered an empty term", "accessible_topology[0]", "reachable from every node"}},
		{name: "node-local, an empty term beside the node", spec: Spec{Upstream: nodeMap},
			answer: topos(topo(dcsiNode, "n1"), &csi.Topology{}),
			msg:    []string{"the upstream answered an empty term", "accessible_topology[1] of [{" + dcsiNode + "=n1}, {}]"}},
		{name: "node-local, a nil term", spec: Spec{Upstream: nodeMap},
			answer: []*csi.Topology{nil},
			msg:    []string{"the upstream answered an empty term"}},
		{name: "an unmapped key", spec: Spec{Upstream: zonal},
			answer: topos(topo(fakeZone, "z1", "fake.example.com/rack", "r7")),
			msg:    []string{"accessible_topology[0]", `key "fake.example.com/rack"`, "proxy.perDriver.upstreamTopology does not map"}},
		{name: "no map at all", answer: topos(topo(fakeZone, "z1")),
			msg: []string{`key "` + fakeZone + `"`, "proxy.perDriver.upstreamTopology"}},
		{name: "a value that is no label value", spec: Spec{Upstream: zonal},
			answer: topos(topo(fakeZone, "zone 1")),
			msg:    []string{`value "zone 1"`, "not a valid label value"}},
		{name: "an empty value", spec: Spec{Upstream: zonal},
			answer: topos(topo(fakeZone, "")),
			msg:    []string{`value ""`, "must not be empty"}},
		{name: "two keys naming one target agree", spec: Spec{Upstream: map[string]string{fakeZone: "zone", "topology.kubernetes.io/zone": "zone"}},
			answer: topos(topo(fakeZone, "z1", "topology.kubernetes.io/zone", "z1")), want: topos(zoneTerm("z1"))},
		{name: "two keys naming one target disagree", spec: Spec{Upstream: map[string]string{fakeZone: "zone", "topology.kubernetes.io/zone": "zone"}},
			answer: topos(topo(fakeZone, "z1", "topology.kubernetes.io/zone", "z2")),
			msg:    []string{"two keys map to " + pk("zone") + " with different values"}},
		{name: "a verbatim target", spec: Spec{Upstream: map[string]string{fakeZone: "topology.kubernetes.io/zone"}},
			answer: topos(topo(fakeZone, "eu-1a")), want: topos(topo("topology.kubernetes.io/zone", "eu-1a"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			if opts == (Options{}) {
				opts = zoneOpts
			}
			d, err := CompileSpec(tc.spec, opts).Answer(tc.answer, tc.requisite)
			checkDecision(t, d, err, tc.want, tc.msg)
		})
	}
}

// TestUpstreamRequirement: requirements go upstream in its own keys, each
// term keeping only mapped keys; a requisite term that keeps nothing
// drops the requisite (it admits everywhere); without a map nothing is
// sent.
func TestUpstreamRequirement(t *testing.T) {
	zonal := CompileUpstream(map[string]string{fakeZone: "zone", "fake.example.com/region": "region"}, zoneOpts)
	for _, tc := range []struct {
		name string
		u    UpstreamMap
		req  *csi.TopologyRequirement
		want *csi.TopologyRequirement
	}{
		{name: "no map", u: UpstreamMap{}, req: &csi.TopologyRequirement{Requisite: topos(zoneTerm("z2"))}},
		{name: "no requirement", u: zonal},
		{name: "zonal", u: zonal,
			req:  &csi.TopologyRequirement{Requisite: topos(zoneTerm("z2")), Preferred: topos(zoneTerm("z2"))},
			want: &csi.TopologyRequirement{Requisite: topos(topo(fakeZone, "z2")), Preferred: topos(topo(fakeZone, "z2"))}},
		{name: "unmapped keys dropped, duplicates too", u: zonal,
			req: &csi.TopologyRequirement{
				Requisite: topos(topo(pk("zone"), "z1", pk("node"), "a", pk("region"), "r"), topo(pk("zone"), "z1", pk("node"), "b", pk("region"), "r"), topo(pk("zone"), "z2", pk("node"), "c", pk("region"), "r")),
				Preferred: topos(topo(pk("zone"), "z2", pk("node"), "c", pk("region"), "r"))},
			want: &csi.TopologyRequirement{
				Requisite: topos(topo(fakeZone, "z1", "fake.example.com/region", "r"), topo(fakeZone, "z2", "fake.example.com/region", "r")),
				Preferred: topos(topo(fakeZone, "z2", "fake.example.com/region", "r"))}},
		{name: "a requisite term with no mapped key admits everywhere", u: zonal,
			req:  &csi.TopologyRequirement{Requisite: topos(zoneTerm("z1"), topo(pk("cluster"), "local")), Preferred: topos(zoneTerm("z1"))},
			want: &csi.TopologyRequirement{Preferred: topos(topo(fakeZone, "z1"))}},
		{name: "two upstream keys for one proxy key: both sent",
			u:    CompileUpstream(map[string]string{fakeZone: "zone", "topology.kubernetes.io/zone": "zone"}, zoneOpts),
			req:  &csi.TopologyRequirement{Requisite: topos(zoneTerm("z1"))},
			want: &csi.TopologyRequirement{Requisite: topos(topo(fakeZone, "z1", "topology.kubernetes.io/zone", "z1"))}},
		{name: "nothing mapped", u: zonal,
			req: &csi.TopologyRequirement{Requisite: topos(topo(pk("node"), "a")), Preferred: topos(topo(pk("node"), "a"))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.u.Requirement(tc.req), protocmp.Transform()); diff != "" {
				t.Errorf("upstream requirement (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSpecNodeLocal: a connection is node-local when the built-in driver
// has no topology list, or when its map targets the node key and it has
// no topology list (SPEC §12, §13).
func TestSpecNodeLocal(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec Spec
		want bool
	}{
		{"built-in without topology", Spec{Builtin: true}, true},
		{"built-in with topology", Spec{Builtin: true, Entries: []Entry{zoneEntry("z1")}}, false},
		{"upstream without a map", Spec{}, false},
		{"upstream mapped to the node key (short)", Spec{Upstream: map[string]string{dcsiNode: "node"}}, true},
		{"upstream mapped to the node key (full)", Spec{Upstream: map[string]string{"topology.hostpath.csi/node": pk("node")}}, true},
		{"upstream mapped to a zone", Spec{Upstream: map[string]string{fakeZone: "zone"}}, false},
		{"upstream mapped to the node key, topology declared", Spec{Upstream: map[string]string{dcsiNode: "node"}, Entries: []Entry{zoneEntry("z1")}}, false},
	} {
		if got := tc.spec.NodeLocal(zoneOpts); got != tc.want {
			t.Errorf("%s: NodeLocal %v, want %v", tc.name, got, tc.want)
		}
		if got := CompileSpec(tc.spec, zoneOpts).NodeLocal(); got != tc.want {
			t.Errorf("%s: Compiled.NodeLocal %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestValidateUpstream: the map's keys and targets must be label keys, no
// two upstream keys may share a target, an extra label may not be a
// target, and the topology list is written in the proxy's keys.
func TestValidateUpstream(t *testing.T) {
	for _, tc := range []struct {
		name    string
		m       map[string]string
		entries []Entry
		msgs    []string // each must appear; none means valid
	}{
		{name: "node-local", m: map[string]string{dcsiNode: "node"}},
		{name: "zonal with topology", m: map[string]string{fakeZone: "zone"}, entries: []Entry{zoneEntry("z1"), zoneEntry("z2")}},
		{name: "identity map", m: map[string]string{"topology.kubernetes.io/zone": "topology.kubernetes.io/zone"},
			entries: []Entry{{Requirements: kvs("topology.kubernetes.io/zone", "eu-1a")}}},
		{name: "bad upstream key", m: map[string]string{"bad key!": "zone"},
			msgs: []string{`proxy.perDriver.upstreamTopology["bad key!"]: the upstream key is not a valid label key`}},
		{name: "bad target", m: map[string]string{fakeZone: "-zone"},
			msgs: []string{`proxy.perDriver.upstreamTopology["fake.example.com/zone"]: target "org.democratic-csi.topology/-zone" is not a valid label key`}},
		{name: "empty target", m: map[string]string{fakeZone: ""},
			msgs: []string{`["fake.example.com/zone"]: maps to nothing`}},
		{name: "two keys, one target", m: map[string]string{fakeZone: "zone", "topology.kubernetes.io/zone": pk("zone")}},
		{name: "extra names a target", m: map[string]string{fakeZone: "zone"},
			entries: []Entry{{Requirements: kvs("region", "r1"), Extra: kvs(pk("zone"), "z1")}},
			msgs:    []string{`proxy.perDriver.topology[0].extra["org.democratic-csi.topology/zone"]: the label is also the target of proxy.perDriver.upstreamTopology["fake.example.com/zone"]`}},
		{name: "topology in the upstream's keys", m: map[string]string{fakeZone: "zone"},
			entries: []Entry{{Requirements: kvs(fakeZone, "z1")}},
			msgs:    []string{`proxy.perDriver.topology[0].requirements["fake.example.com/zone"]: "fake.example.com/zone" is the upstream's key`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateUpstream(tc.m, tc.entries, zoneOpts)
			if len(tc.msgs) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("valid, want an error")
			}
			for _, m := range tc.msgs {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q lacks %q", err, m)
				}
			}
		})
	}
}

// checkDecision checks a decision against want, or, when msgs are given,
// that err is a refusal whose message holds each of them.
func checkDecision(t *testing.T, d Decision, err error, want []*csi.Topology, msgs []string) {
	t.Helper()
	if len(msgs) > 0 {
		if err == nil {
			t.Fatalf("got %v, want a refusal", d.Topologies())
		}
		for _, m := range msgs {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("message %q lacks %q", err, m)
			}
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, d.Topologies(), protocmp.Transform()); diff != "" {
		t.Errorf("accessible_topology (-want +got):\n%s", diff)
	}
}
