package accessible

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/labels"
)

// Upstreams with topology of their own (SPEC §13): a connection's
// proxy.perDriver.upstreamTopology maps the keys an upstream answers in
// (org.democratic-csi.topology/node, a cloud's zone key) to this proxy's
// keys, which are what nodes report and PV node affinity may name. An
// upstream's answer is translated term by term into the proxy's keys and
// checked (Compiled.Answer); requirements go upstream translated back
// (UpstreamMap.Requirement), keeping only mapped keys.

// upstreamPath is where the map lives in a connection file.
const upstreamPath = "proxy.perDriver.upstreamTopology"

// UpstreamMap is a connection's upstreamTopology resolved for the proxy's
// prefix: upstream key → full proxy key, and back. Several upstream keys
// may name one proxy key (a driver that answers a zone under its own key
// and under topology.kubernetes.io/zone); translating back sets each of
// them. The zero value maps nothing (the upstream's keys are removed from
// requirements, and an answer in them is refused as widening, SPEC §8).
type UpstreamMap struct {
	toProxy    map[string]string
	toUpstream map[string][]string
}

// CompileUpstream resolves m (upstream key → proxy key; short proxy keys
// get the prefix). m should have passed ValidateUpstream.
func CompileUpstream(m map[string]string, opts Options) UpstreamMap {
	if len(m) == 0 {
		return UpstreamMap{}
	}
	u := UpstreamMap{toProxy: make(map[string]string, len(m)), toUpstream: make(map[string][]string, len(m))}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		full := labels.FullKey(opts.Prefix, m[k])
		u.toProxy[k] = full
		u.toUpstream[full] = append(u.toUpstream[full], k)
	}
	return u
}

// Empty reports a connection without upstreamTopology.
func (u UpstreamMap) Empty() bool { return len(u.toProxy) == 0 }

// MapsTo reports whether some upstream key is translated to proxy key key.
func (u UpstreamMap) MapsTo(key string) bool {
	_, ok := u.toUpstream[key]
	return ok
}

// Requirement is the accessibility requirement sent upstream for req: each
// term with the proxy keys the map translates back, the others dropped,
// duplicates removed. A requisite term that keeps no key admits every
// place the upstream knows, so the requisite is dropped with it; preferred
// terms that keep no key are dropped alone. nil when nothing is left, or
// when the map is empty (the upstream's keys are unknown, so nothing it
// could read is sent).
func (u UpstreamMap) Requirement(req *csi.TopologyRequirement) *csi.TopologyRequirement {
	if u.Empty() || req == nil {
		return nil
	}
	out := &csi.TopologyRequirement{}
	var requisite, preferred termSet
	for i, t := range req.GetRequisite() {
		up := u.Term(t)
		if up == nil {
			out.Requisite = nil
			break
		}
		if requisite.add(up.Segments, i) {
			out.Requisite = append(out.Requisite, up)
		}
	}
	for i, t := range req.GetPreferred() {
		if up := u.Term(t); up != nil && preferred.add(up.Segments, i) {
			out.Preferred = append(out.Preferred, up)
		}
	}
	if len(out.Requisite) == 0 && len(out.Preferred) == 0 {
		return nil
	}
	return out
}

// Term is one proxy topology translated back into the upstream's keys
// (GetCapacity's accessible_topology, a requirement's term): nil when
// none of its keys is mapped.
func (u UpstreamMap) Term(t *csi.Topology) *csi.Topology {
	var segs map[string]string
	for k, v := range t.GetSegments() {
		for _, up := range u.toUpstream[k] {
			if segs == nil {
				segs = make(map[string]string, len(t.GetSegments()))
			}
			segs[up] = v
		}
	}
	if segs == nil {
		return nil
	}
	return &csi.Topology{Segments: segs}
}

// translate turns an upstream's accessible_topology into the proxy's
// keys, term by term. Every key must be mapped and every value must be a
// valid label value (it becomes PV node affinity), and no term may be
// empty (a term without keys admits every node, so the volume would be
// reported reachable everywhere whatever the other terms say); otherwise
// the error names the term, the key or the value.
func (u UpstreamMap) translate(answer []*csi.Topology) ([]map[string]string, error) {
	out := make([]map[string]string, 0, len(answer))
	for i, t := range answer {
		segs := termSegments(t)
		if len(segs) == 0 {
			return nil, fmt.Errorf("the upstream answered an empty term: accessible_topology[%d] of %s has no key, which would make the volume reachable from every node; an upstream with %s must name where each volume is",
				i, showTopologies(answer), upstreamPath)
		}
		translated := make(map[string]string, len(segs))
		for _, s := range segs {
			to, ok := u.toProxy[s.key]
			if !ok {
				return nil, fmt.Errorf("the upstream answered accessible_topology[%d] %s with key %s, which %s does not map to a key of this proxy (map every key the upstream answers in)",
					i, showSegments(segs), strconv.Quote(short(s.key)), upstreamPath)
			}
			if p := labelValueProblem(s.value); p != "" {
				return nil, fmt.Errorf("the upstream answered accessible_topology[%d] %s: value %s of key %s is not a valid label value (%s), so no node can carry it",
					i, showSegments(segs), strconv.Quote(short(s.value)), strconv.Quote(short(s.key)), p)
			}
			if prev, dup := translated[to]; dup && prev != s.value {
				return nil, fmt.Errorf("the upstream answered accessible_topology[%d] %s: two keys map to %s with different values (%q, %q)",
					i, showSegments(segs), to, short(prev), short(s.value))
			}
			translated[to] = s.value
		}
		out = append(out, translated)
	}
	return out, nil
}

// Answer is CreateVolume's accessible_topology for a volume whose upstream
// answered accessible_topology upstream (SPEC §13): each term translated
// into the proxy's keys; with a topology list, each term must lie inside
// some entry (match its requirements and contradict none of its extra
// labels) and gets that entry's segments and extra labels; then only the
// terms some requisite term admits are kept, narrowed by that term's
// other keys as Decide narrows (never by the node key), so the volume is
// never reported reachable from a node no requisite term admits.
//
// An error is the refusal, without a status: an empty term, an unmapped
// key, an invalid value, a term outside the topology list, or an answer no requisite term
// admits. The caller deletes the upstream volume and fails the call with
// FAILED_PRECONDITION (AnswerCode).
func (c *Compiled) Answer(upstream []*csi.Topology, requisite []*csi.Topology) (Decision, error) {
	terms, err := c.upstream.translate(upstream)
	if err != nil {
		return Decision{}, err
	}
	if len(c.entries) > 0 {
		var inside []map[string]string
		for i, t := range terms {
			found := false
			for e := range c.norm {
				if m, ok := c.serve(e, &csi.Topology{Segments: t}); ok {
					inside = append(inside, union(m, t))
					found = true
				}
			}
			if !found {
				return Decision{}, fmt.Errorf("the upstream answered accessible_topology[%d] %s, which is %s; outside what proxy.perDriver.topology declares (%s), so the proxy would report the volume reachable where the connection says its storage is not",
					i, showMap(upstream[i].GetSegments()), translatedAs(t), c.Offers())
			}
		}
		terms = inside
	}
	if len(requisite) > 0 {
		var kept []map[string]string
		index := newRequisiteIndex(requisite)
		for _, t := range terms {
			reqs := sortedSegments(t)
			for _, j := range index.matching(reqs) {
				q := requisite[j]
				narrowed, ok := narrow(t, reqs, q, c.nodeKey)
				if !ok {
					continue
				}
				if err := badNarrowing(KindRequisite, j, narrowed, t); err != nil {
					return Decision{}, errors.New(status.Convert(err).Message())
				}
				kept = append(kept, narrowed)
			}
		}
		if len(kept) == 0 {
			var sb strings.Builder
			writeList(&sb, len(terms), func(i int) []segment { return sortedSegments(terms[i]) })
			asked := sb.String()
			sb.Reset()
			writeList(&sb, len(requisite), func(i int) []segment { return termSegments(requisite[i]) })
			return Decision{}, fmt.Errorf("the upstream answered accessible_topology %s, which is %s in this proxy's keys; no term of the request's requisite %s admits it (the upstream did not place the volume where it was asked to)",
				showTopologies(upstream), asked, sb.String())
		}
		terms = kept
	}
	return decision(terms), nil
}

// AnswerCode is the status of a CreateVolume refused by Answer (or as
// widening): the upstream object is deleted, and the admin must change
// the connection file (or the upstream its placement) before the call can
// succeed.
const AnswerCode = codes.FailedPrecondition

// union is a's segments plus b's, in a new map.
func union(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	maps.Copy(out, a)
	maps.Copy(out, b)
	return out
}

// sortedSegments is a topology map as segments sorted by key.
func sortedSegments(m map[string]string) []segment {
	out := make([]segment, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, segment{k, m[k]})
	}
	return out
}

func translatedAs(t map[string]string) string {
	return "in this proxy's keys " + showMap(t)
}

func showMap(m map[string]string) string { return showSegments(sortedSegments(m)) }

func showSegments(segs []segment) string {
	var sb strings.Builder
	writeSegments(&sb, segs)
	return sb.String()
}

func showTopologies(ts []*csi.Topology) string {
	var sb strings.Builder
	writeList(&sb, len(ts), func(i int) []segment { return termSegments(ts[i]) })
	return sb.String()
}

// short cuts s for a message as writeShort does.
func short(s string) string {
	var sb strings.Builder
	writeShort(&sb, s)
	return sb.String()
}

// ValidateUpstream checks a connection's upstreamTopology against its
// topology list and reports every problem naming its path:
//
//   - each upstream key is a valid label key (the upstream's key, used
//     verbatim) and each target, with the prefix for a short key, too;
//   - no extra label of the topology list is a target (the answer sets
//     that label, and the two could disagree);
//   - no requirement of the topology list names an upstream key that is
//     not also a target (topology is written in this proxy's keys, which
//     nodes report; the upstream's would match no node).
func ValidateUpstream(m map[string]string, entries []Entry, opts Options) error {
	var errs []error
	fail := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s[%q]: %s", upstreamPath, key, fmt.Sprintf(format, args...)))
	}
	targets := map[string]string{} // proxy key -> the first upstream key naming it
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if p := labelKeyProblem(k); p != "" {
			fail(k, "the upstream key is not a valid label key (%s)", p)
		}
		v := m[k]
		if v == "" {
			fail(k, "maps to nothing: give this proxy's key (a short key such as zone gets the prefix)")
			continue
		}
		full := labels.FullKey(opts.Prefix, v)
		if p := labelKeyProblem(full); p != "" {
			fail(k, "target %q is not a valid label key (%s)", full, p)
			continue
		}
		if _, ok := targets[full]; !ok {
			targets[full] = k
		}
	}
	for i, e := range entries {
		for _, k := range slices.Sorted(maps.Keys(e.Extra)) {
			if up, ok := targets[k]; ok {
				errs = append(errs, fmt.Errorf("%s[%d].extra[%q]: the label is also the target of %s[%q], so the upstream's answer sets it; drop it from extra",
					listPath, i, k, upstreamPath, up))
			}
		}
		for _, k := range slices.Sorted(maps.Keys(e.Requirements)) {
			full := labels.FullKey(opts.Prefix, k)
			if _, mapped := m[full]; mapped {
				if _, target := targets[full]; !target {
					errs = append(errs, fmt.Errorf("%s[%d].requirements[%q]: %q is the upstream's key (%s maps it to %q); write topology in this proxy's keys",
						listPath, i, k, full, upstreamPath, labels.FullKey(opts.Prefix, m[full])))
				}
			}
		}
	}
	return errors.Join(errs...)
}
