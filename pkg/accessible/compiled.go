package accessible

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Compiled is a connection's topology list prepared once for the options:
// requirements with full keys and each entry's accessible topology. A
// loaded connection keeps one (connection.Connection.Topology), so a call
// only matches terms against it.
//
// A Compiled is immutable and safe for concurrent use.
type Compiled struct {
	opts    Options
	entries []Entry
	// norm[i] is entry i's requirements with full keys, sorted by key.
	norm [][]segment
	// topo[i] is entry i's accessible topology: extra ∪ prefixed
	// requirements. Callers get copies.
	topo []map[string]string
	all  Decision
	// nodeKey is opts.NodeKey(), built once.
	nodeKey string
	// upstream translates the upstream's topology keys (SPEC §13).
	upstream UpstreamMap
	// nodeLocal: the connection's volumes live on one node's disk.
	nodeLocal bool
}

// Spec is what a connection file says about where its volumes are.
type Spec struct {
	// Entries is proxy.perDriver.topology.
	Entries []Entry
	// Upstream is proxy.perDriver.upstreamTopology: upstream key → this
	// proxy's key.
	Upstream map[string]string
	// Builtin is set for the built-in local-hostpath driver, whose
	// volumes live on the disk of the node that serves the call.
	Builtin bool
}

// NodeLocal reports whether a connection's volumes live on one node's
// disk (SPEC §12, §13): a built-in local-hostpath connection without a
// topology list (its base path is not declared shared storage), or an
// upstream whose answer the connection maps to the node key (<prefix>/node)
// without a topology list. Such a connection is decided by the node that
// serves the call (Placement), and nodes report the node key.
func (s Spec) NodeLocal(opts Options) bool {
	return s.nodeLocal(CompileUpstream(s.Upstream, opts), opts)
}

// nodeLocal is NodeLocal with the upstream map already compiled.
func (s Spec) nodeLocal(upstream UpstreamMap, opts Options) bool {
	return len(s.Entries) == 0 && (s.Builtin || upstream.MapsTo(opts.NodeKey()))
}

// CompileSpec prepares a connection's Spec (which should have passed
// Validate and ValidateUpstream) for opts.
func CompileSpec(s Spec, opts Options) *Compiled {
	c := Compile(s.Entries, opts)
	c.upstream = CompileUpstream(s.Upstream, opts)
	c.nodeLocal = s.nodeLocal(c.upstream, opts)
	return c
}

// NodeLocal reports a node-local connection (Spec.NodeLocal).
func (c *Compiled) NodeLocal() bool { return c.nodeLocal }

// Upstream is the connection's upstreamTopology, resolved.
func (c *Compiled) Upstream() UpstreamMap { return c.upstream }

// Compile prepares entries (which should have passed Validate) for opts.
// The connection is neither node-local nor mapped (CompileSpec).
func Compile(entries []Entry, opts Options) *Compiled {
	c := &Compiled{opts: opts, entries: entries, norm: normalize(entries, opts), nodeKey: opts.NodeKey()}
	c.topo = make([]map[string]string, len(entries))
	for i := range entries {
		segments := make(map[string]string, len(c.norm[i])+len(entries[i].Extra))
		maps.Copy(segments, entries[i].Extra)
		// Requirements last: they are what matching used, so on a clash
		// (which Validate rejects) they must be what the CO enforces.
		for _, s := range c.norm[i] {
			segments[s.key] = s.value
		}
		c.topo[i] = segments
	}
	c.all = decision(c.topo)
	return c
}

// Options returns the options c was compiled for.
func (c *Compiled) Options() Options { return c.opts }

// Empty reports a connection without a topology list: reachable from every
// node, unless something else pins it.
func (c *Compiled) Empty() bool { return len(c.entries) == 0 }

// All is the accessible_topology of an existing volume: every entry,
// duplicates dropped; everywhere when there are no entries. ControllerGetVolume
// and ListVolumes cannot know which terms CreateVolume chose, so they report
// this.
func (c *Compiled) All() Decision { return c.all }

// matches reports whether a term matches an entry's normalized
// requirements: every key both mention has the same value. Keys only the
// term mentions do not restrict the entry, and keys only the entry mentions
// are not asked about.
//
// Keys are compared in full: entry keys are made full by normalize, and
// request keys are taken as sent, never stripped of a prefix. Comparing by
// short key would let a foreign "b/zone" collide with our "a/zone". Extra
// labels are not requirements and take no part.
func matches(term *csi.Topology, reqs []segment) bool {
	segments := term.GetSegments()
	for _, s := range reqs {
		if v, ok := segments[s.key]; ok && v != s.value {
			return false
		}
	}
	return true
}

// firstMatch returns the index of the first term matching reqs, or
// len(terms).
func firstMatch(terms []*csi.Topology, reqs []segment) int {
	for i, t := range terms {
		if matches(t, reqs) {
			return i
		}
	}
	return len(terms)
}

// Admits reports whether the connection can serve a volume accessible from
// topology: some entry matches it as a term. A connection without a
// topology list, and an empty topology, are always admitted. GetCapacity
// uses it (a segment no entry admits has capacity 0), and so does a
// group's choice of member (SPEC §11).
func (c *Compiled) Admits(topology *csi.Topology) bool {
	if len(c.entries) == 0 || len(topology.GetSegments()) == 0 {
		return true
	}
	for i := range c.norm {
		if _, ok := c.serve(i, topology); ok {
			return true
		}
	}
	return false
}

// serve returns the accessible topology entry i gives for term, and
// whether it serves the term at all: the term must match the entry's
// requirements and contradict none of its extra labels (no node could
// carry both). The result is the entry's topology narrowed by the term.
func (c *Compiled) serve(i int, term *csi.Topology) (map[string]string, bool) {
	if !matches(term, c.norm[i]) {
		return nil, false
	}
	return narrow(c.topo[i], c.norm[i], term, c.nodeKey)
}

// Decide answers a CreateVolume's accessibility requirements (SPEC §8) for
// the connection named connection (used in messages only):
//
//   - no requirements: All, the whole list (nothing to check);
//   - no list: everywhere, or under type node the node the CO asked for;
//   - otherwise the terms are requisite (else preferred), and the call
//     succeeds if some term matches some entry (the CSI spec asks that the
//     volume be accessible from at least one requisite topology), else
//     RESOURCE_EXHAUSTED naming what was asked and what is offered.
//
// Each matching (entry, term) pair gives one accessible topology: the
// entry's segments plus the term's segments for keys the entry does not
// constrain, so the volume is never accessible from a node that no term
// admits (a class whose allowedTopologies uses topology.kubernetes.io/zone
// keeps its PVs inside it). The node key (Options.NodeKey) never narrows:
// zone-wide storage is not pinned to the node that happened to be
// selected. Pairs are ordered by the first preferred term their entry
// matches, then by entry and term order; duplicates are dropped.
func (c *Compiled) Decide(connection string, requisite, preferred []*csi.Topology) (Decision, error) {
	if len(requisite) == 0 && len(preferred) == 0 {
		return c.all, nil
	}
	// The CSI spec lets a CO send only preferred; without requisite the SP
	// may pick anywhere, but the proxy still has to pick among its entries,
	// and preferred is the only statement of where the CO wants the volume.
	terms, kind := requisite, "requisite"
	if len(terms) == 0 {
		terms, kind = preferred, "preferred"
	}
	if len(c.entries) == 0 {
		if c.opts.Type == TypeNode {
			if d := c.pinToRequestedNode(requisite, preferred); !d.Everywhere() {
				return d, nil
			}
		}
		return c.narrowToTerms(kind, terms, preferred)
	}
	type pick struct {
		rank, entry, term int
		segments          map[string]string
	}
	var picks []pick
	for i, reqs := range c.norm {
		// rank = index of the first preferred term the entry matches;
		// len(preferred) sorts entries matching none after the others.
		rank := firstMatch(preferred, reqs)
		for j, term := range terms {
			segments, ok := c.serve(i, term)
			if !ok {
				continue
			}
			// A segment that narrows the result becomes a PV node
			// affinity requirement, which the API server would refuse if
			// it is not a valid label; say so now, before anything is made.
			if err := badNarrowing(kind, j, segments, c.topo[i]); err != nil {
				return Decision{}, err
			}
			picks = append(picks, pick{rank, i, j, segments})
		}
	}
	if len(picks) == 0 {
		// RESOURCE_EXHAUSTED is the CSI spec's code for "unable to
		// provision in accessible topology", and on a WaitForFirstConsumer
		// claim the external-provisioner reacts to it by dropping the
		// selected node so the scheduler picks again. INVALID_ARGUMENT (the
		// seed's choice) is a final error there: the selected node stays and
		// the same node is retried forever.
		return Decision{}, status.Error(codes.ResourceExhausted, notAccessibleMessage(connection, kind, terms, c.norm))
	}
	slices.SortStableFunc(picks, func(a, b pick) int {
		return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.entry, b.entry), cmp.Compare(a.term, b.term))
	})
	out := make([]map[string]string, len(picks))
	for i, p := range picks {
		out[i] = p.segments
	}
	return decision(out), nil
}

// narrowToTerms is Decide for a connection without a topology list: its
// storage is reachable from every node, but the volume must not be usable
// from a node that no term admits (a class's allowedTopologies), so each
// term, without the node key, is one accessible topology. Terms that
// appear in preferred come first, in its order. A term of nothing but the
// node key leaves the volume reachable everywhere.
func (c *Compiled) narrowToTerms(kind string, terms, preferred []*csi.Topology) (Decision, error) {
	type pick struct {
		rank, term int
		segments   map[string]string
	}
	// The rank of a term is its first place in preferred: a few are
	// compared, many found in a set, so that n terms cost O(n), not
	// O(n·len(preferred)).
	var ranks *termSet
	if len(preferred) > dedupePairwise {
		ranks = &termSet{}
		for i, p := range preferred {
			ranks.add(p.GetSegments(), i)
		}
	}
	picks := make([]pick, 0, len(terms))
	for j, term := range terms {
		segments, _ := narrow(map[string]string{}, nil, term, c.nodeKey)
		if err := badNarrowing(kind, j, segments, nil); err != nil {
			return Decision{}, err
		}
		rank, ok := 0, false
		if ranks != nil {
			rank, ok = ranks.find(term.GetSegments())
		} else {
			rank = slices.IndexFunc(preferred, func(p *csi.Topology) bool { step(); return maps.Equal(p.GetSegments(), term.GetSegments()) })
			ok = rank >= 0
		}
		if !ok {
			rank = len(preferred)
		}
		picks = append(picks, pick{rank, j, segments})
	}
	slices.SortStableFunc(picks, func(a, b pick) int { return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.term, b.term)) })
	out := make([]map[string]string, len(picks))
	for i, p := range picks {
		out[i] = p.segments
	}
	return decision(out), nil
}

// narrow returns an entry's topology plus the term's segments for keys the
// entry's requirements do not constrain, except the node key. ok is false
// when a term segment contradicts one of the entry's extra labels: no node
// could carry both, so the pair admits no node.
func narrow(entryTopology map[string]string, reqs []segment, term *csi.Topology, nodeKey string) (map[string]string, bool) {
	out := entryTopology
	cloned := false
	for k, v := range term.GetSegments() {
		if k == nodeKey || constrains(reqs, k) {
			continue
		}
		if have, ok := entryTopology[k]; ok {
			if have != v {
				return nil, false
			}
			continue
		}
		if !cloned {
			out, cloned = maps.Clone(entryTopology), true
		}
		out[k] = v
	}
	return out, true
}

// badNarrowing checks the segments a term added to an entry's topology:
// each must be a valid label key and value, or the call is
// INVALID_ARGUMENT naming the term.
func badNarrowing(kind string, term int, result, entryTopology map[string]string) error {
	if len(result) == len(entryTopology) {
		return nil // nothing added
	}
	for _, k := range slices.Sorted(maps.Keys(result)) {
		if _, own := entryTopology[k]; own {
			continue
		}
		problem := labelKeyProblem(k)
		what := "key"
		if problem == "" {
			problem, what = labelValueProblem(result[k]), "value"
		}
		if problem != "" {
			var sb strings.Builder
			writeShort(&sb, k)
			sb.WriteByte('=')
			writeShort(&sb, result[k])
			return status.Errorf(codes.InvalidArgument, "accessibility_requirements.%s[%d]: segment %s: the %s is not a valid label %s (%s)",
				kind, term, sb.String(), what, what, problem)
		}
	}
	return nil
}

// pinToRequestedNode handles a connection without a topology list under the
// node topology type: node-local storage is only reachable from the node
// that created it, which is the node the CO asked for.
func (c *Compiled) pinToRequestedNode(requisite, preferred []*csi.Topology) Decision {
	key := c.nodeKey
	// Preferred first: in strict and WaitForFirstConsumer modes it starts
	// with the selected node, while requisite is sorted by the provisioner.
	for _, list := range [2][]*csi.Topology{preferred, requisite} {
		for _, term := range list {
			// An empty value is not a node name (CSI segment values are
			// non-empty); keep looking.
			if v := term.GetSegments()[key]; v != "" {
				return Pinned(key, v)
			}
		}
	}
	return Decision{}
}

// Decision is where a new or existing volume is accessible from: a list of
// topologies (each a set of label requirements, ANDed; the list ORed), or
// everywhere (no accessible_topology at all).
type Decision struct {
	topologies []map[string]string
}

// Pinned is a decision for one label: the volume is reachable only from
// nodes carrying key=value (one node, for a node-identity key).
func Pinned(key, value string) Decision {
	return Decision{topologies: []map[string]string{{key: value}}}
}

// decision keeps the first of each set of equal topologies in order; a
// topology without labels makes the volume reachable everywhere. It
// reuses list's array; removing duplicates costs O(len(list)) (termSet).
func decision(list []map[string]string) Decision {
	kept := list[:0]
	var seen *termSet
	if len(list) > dedupePairwise {
		seen = &termSet{}
	}
	for i, t := range list {
		if len(t) == 0 {
			// A volume reachable from any one of its topologies is
			// reachable everywhere if one of them has no labels. An empty
			// term would instead be dropped by the provisioner when it
			// builds node affinity, silently narrowing it to the others.
			return Decision{}
		}
		// A CreateVolume's one or two picks are compared with those kept,
		// which allocates nothing.
		if seen == nil && !slices.ContainsFunc(kept, func(k map[string]string) bool { step(); return maps.Equal(k, t) }) ||
			seen != nil && seen.add(t, i) {
			kept = append(kept, t)
		}
	}
	return Decision{topologies: kept}
}

// Everywhere reports a volume reachable from every node.
func (d Decision) Everywhere() bool { return len(d.topologies) == 0 }

// Constrains reports whether every topology of d requires key, so the
// volume is reachable only from nodes carrying one of the values it names
// (for the node key: from the nodes named). Everywhere constrains nothing.
func (d Decision) Constrains(key string) bool {
	if len(d.topologies) == 0 {
		return false
	}
	for _, t := range d.topologies {
		if _, ok := t[key]; !ok {
			return false
		}
	}
	return true
}

// Topologies returns the accessible_topology as new messages the caller
// may keep and change; nil means everywhere.
func (d Decision) Topologies() []*csi.Topology {
	if len(d.topologies) == 0 {
		return nil
	}
	out := make([]*csi.Topology, len(d.topologies))
	for i, t := range d.topologies {
		out[i] = &csi.Topology{Segments: maps.Clone(t)}
	}
	return out
}
