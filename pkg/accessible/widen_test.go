package accessible

import (
	"errors"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
)

// TestCreatedNeverWidens (SPEC §8): an upstream that answers topology
// behind a connection that neither declares topology nor maps the
// upstream's keys is refused, unless under type node the decision pins
// the volume to the node asked for; a declared topology keeps the proxy's
// decision; an upstream that answers nothing keeps it too.
func TestCreatedNeverWidens(t *testing.T) {
	rack := topos(topo("upstream.example.com/rack", "r7"))
	pinned := Pinned(pk("node"), "n2")
	for _, tc := range []struct {
		name     string
		t        *Compiled
		decision Decision
		upstream []*csi.Topology
		want     []*csi.Topology
		msg      []string
	}{
		{name: "nothing answered", t: Compile(nil, zoneOpts)},
		{name: "answered, nothing declared", t: Compile(nil, zoneOpts), upstream: rack,
			msg: []string{"accessible_topology [{upstream.example.com/rack=r7}]", "declares no proxy.perDriver.topology", "in /c/a.yaml", "proxy.perDriver.upstreamTopology (e.g. {upstream.example.com/rack: node}"}},
		{name: "answered, topology declared", t: Compile([]Entry{zoneEntry("z1")}, zoneOpts), decision: Compile([]Entry{zoneEntry("z1")}, zoneOpts).All(),
			upstream: rack, want: topos(zoneTerm("z1"))},
		{name: "type node, pinned to the node asked for", t: Compile(nil, nodeOpts), decision: pinned, upstream: rack, want: topos(topo(pk("node"), "n2"))},
		{name: "type node, nothing to pin to", t: Compile(nil, nodeOpts), upstream: rack,
			msg: []string{"name no node (" + pk("node") + ")"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Placement{}.Created("/c/a.yaml", tc.t, tc.decision, tc.upstream, nil)
			var we WidenError
			if len(tc.msg) > 0 && !errors.As(err, &we) {
				t.Fatalf("err %v, want a WidenError", err)
			}
			checkDecision(t, d, err, tc.want, tc.msg)
		})
	}
}
