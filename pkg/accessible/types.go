// Package accessible decides where a connection's volume may be used: it
// checks a CreateVolume's accessibility requirements against the
// connection's topology list (proxy.perDriver.topology) and computes the
// accessible_topology that the external-provisioner turns into PV node
// affinity (SPEC §8). It is pure: no I/O, no clock, no configuration
// files; table tests drive it directly.
//
// Compile prepares a connection's list once when the connection is
// loaded; Compiled.Decide answers a CreateVolume, Compiled.Admits a
// GetCapacity segment or a group's member choice, and Compiled.All
// decorates an existing volume. Validate checks a list and names every
// problem by its path in the connection file.
//
// Connection groups (SPEC §11, group.go): Choose picks the member a
// CreateVolume goes to from the request's terms and an admits function
// per member, Choice.Explain says why, and NoMemberError is the refusal
// that lists what each member offers.
//
// Node-local connections (SPEC §12, nodelocal.go): a local-hostpath
// connection without a topology list, or an upstream mapped to the node
// key (Spec.NodeLocal), keeps its volumes on one node's disk, so
// Options.DecideNodeLocal pins a CreateVolume to the Host that serves it
// (or refuses a request for another node), Options.AdmitsHost answers
// GetCapacity and Options.Pin decorates an existing volume. Placement
// (placement.go) chooses between these and the Compiled answers, for
// pkg/csi and the topology dry run alike.
//
// Upstreams with topology of their own (SPEC §13, upstream.go): a
// connection's upstreamTopology (UpstreamMap) translates the upstream's
// answer into this proxy's keys (Compiled.Answer) and requirements back
// into the upstream's (UpstreamMap.Requirement).
package accessible

import "github.com/democratic-csi/proxy-topology/pkg/labels"

// Entry is one item of a connection's proxy.perDriver.topology list: a place
// where the connection's storage is reachable.
type Entry struct {
	// Requirements are topology segments. Short keys get "<prefix>/";
	// keys containing '/' are used verbatim.
	Requirements map[string]string `koanf:"requirements" yaml:"requirements"`
	// Extra are full label keys added to accessible_topology as they are.
	Extra map[string]string `koanf:"extra" yaml:"extra"`
}

// Options carries the proxy's node-topology settings that matching needs.
// nodetopology.Evaluator.Accessibility builds them from the main config.
// The zero value matches with unprefixed short keys and cluster semantics.
type Options struct {
	// Prefix is joined to short requirement keys (labels.FullKey), e.g.
	// "org.democratic-csi.topology" turns "zone" into
	// "org.democratic-csi.topology/zone".
	Prefix string
	// Type is the normalized node topology type: "cluster", "node" or
	// "zone". Only "node" changes behaviour (see Compiled.Decide); any
	// other value, including "", behaves like "cluster".
	Type string
}

// NodeKey is the label key under which nodes report their own name:
// "<prefix>/node". It identifies one node, so it never narrows where
// zone-wide storage may be used.
func (o Options) NodeKey() string { return labels.FullKey(o.Prefix, nodeShortKey) }

// TypeNode is the node topology type (proxy.nodeTopology.type: node) under
// which a connection without a topology list is still pinned to the node
// that asked for it. nodetopology.TypeNode is this value.
const TypeNode = "node"

// nodeShortKey is the short key the node topology type reports a node under.
const nodeShortKey = "node"
