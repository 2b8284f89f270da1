package e2e

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
)

// This file rebuilds, for tests, the CreateVolumeRequest
// accessibility_requirements that the external-provisioner (v6) sends. It
// follows GenerateAccessibilityRequirements in
// kubernetes-csi/external-provisioner pkg/controller/topology.go (with its
// helpers aggregateTopologies, flatten, topologyTerm.compare/subset and
// getPVCNameHashAndIndexOffset); v6 changed only the module path against
// v5, not this logic. It is written from reading that code, not copied, and
// covers what the three StorageClass modes of SPEC §9 reach: no API-server
// errors, no caches (the provisioner's pvcNodeStore only replays earlier
// answers for the same claim).

// provisionerFlags are the external-provisioner flags that shape the
// requirements (--strict-topology, --immediate-topology; the provisioner's
// defaults are false and true).
type provisionerFlags struct {
	strictTopology    bool
	immediateTopology bool
}

// labelExpression is one StorageClass allowedTopologies matchLabelExpressions
// entry: its values are ORed.
type labelExpression struct {
	key    string
	values []string
}

// selectorTerm is one allowedTopologies entry: its expressions are ANDed,
// and the entries are ORed.
type selectorTerm []labelExpression

// k8sNode is what the provisioner reads about a node: the topology keys the
// node plugin registered in its CSINode object (the keys of NodeGetInfo's
// accessible_topology) and the Node's labels (kubelet copies the segments
// there; the admin may add more).
type k8sNode struct {
	name         string
	topologyKeys []string
	labels       map[string]string
}

// claimRequest is one provisioning attempt as the provisioner sees it.
type claimRequest struct {
	// pvcName is the claim's name; Immediate binding spreads preferred
	// terms by its hash.
	pvcName           string
	allowedTopologies []selectorTerm
	// selectedNode is the scheduler's choice under WaitForFirstConsumer;
	// empty means Immediate binding.
	selectedNode string
	flags        provisionerFlags
}

// segment and term mirror the provisioner's topologySegment/topologyTerm: a
// term's segments are ANDed and kept sorted by key, then value.
type segment struct{ key, value string }
type term []segment

func (t term) sort() {
	slices.SortFunc(t, func(a, b segment) int {
		return cmp.Or(strings.Compare(a.key, b.key), strings.Compare(a.value, b.value))
	})
}

// compareTerms orders shorter terms first, then segment by segment, which
// is the order the provisioner sorts requisite terms in.
func compareTerms(a, b term) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	for i := range a {
		if c := cmp.Or(strings.Compare(a[i].key, b[i].key), strings.Compare(a[i].value, b[i].value)); c != 0 {
			return c
		}
	}
	return 0
}

// subsetOf reports whether every segment of t is in other.
func (t term) subsetOf(other term) bool {
	for _, s := range t {
		if !slices.Contains(other, s) {
			return false
		}
	}
	return true
}

// termFromLabels picks keys out of labels; ok is false when one is missing.
func termFromLabels(labels map[string]string, keys []string) (term, bool) {
	out := make(term, 0, len(keys))
	for _, k := range keys {
		v, ok := labels[k]
		if !ok {
			return nil, false
		}
		out = append(out, segment{k, v})
	}
	out.sort()
	return out, true
}

// flattenAllowed distributes each allowedTopologies entry's ORed values over
// its ANDed expressions, giving one term per combination, and ORs the
// entries' results. Like the provisioner, an expression without values
// drops what was built so far.
func flattenAllowed(allowed []selectorTerm) []term {
	var out []term
	for _, st := range allowed {
		var built []term
		for _, expr := range st {
			var next []term
			for _, v := range expr.values {
				if len(built) == 0 {
					next = append(next, term{{expr.key, v}})
					continue
				}
				for _, b := range built {
					next = append(next, append(slices.Clone(b), segment{expr.key, v}))
				}
			}
			built = next
		}
		out = append(out, built...)
	}
	for _, t := range out {
		t.sort()
	}
	return out
}

// spreadOffset is the provisioner's StatefulSet spreading for Immediate
// binding: FNV-1 (32 bit) of the claim name plus, for names ending in
// "-<number>", that number, hashing only the part between the last two
// dashes ("data-web-3" hashes "web" and adds 3), so that one StatefulSet's
// claims rotate through the topologies while one replica's claims stay
// together.
func spreadOffset(pvcName string) uint32 {
	hashed, index := pvcName, uint32(0)
	if i := strings.LastIndexByte(pvcName, '-'); i >= 0 {
		if n, err := strconv.ParseUint(pvcName[i+1:], 10, 32); err == nil {
			index = uint32(n)
			hashed = pvcName[:i]
			if j := strings.LastIndexByte(hashed, '-'); j >= 0 {
				hashed = hashed[j+1:]
			}
		}
	}
	h := fnv.New32()
	h.Write([]byte(hashed))
	return h.Sum32() + index
}

// rotate returns terms starting at index i and wrapping around.
func rotate(terms []term, i int) []term {
	return append(slices.Clone(terms[i:]), terms[:i]...)
}

// accessibilityRequirements returns what the provisioner would put in
// CreateVolumeRequest.accessibility_requirements (nil: none).
func accessibilityRequirements(req claimRequest, nodes []k8sNode) (*csi.TopologyRequirement, error) {
	var (
		selected     term
		selectedKeys []string
		requisite    []term
	)
	if req.selectedNode != "" {
		i := slices.IndexFunc(nodes, func(n k8sNode) bool { return n.name == req.selectedNode })
		if i < 0 || len(nodes[i].topologyKeys) == 0 {
			return nil, fmt.Errorf("no topology key found for node %s", req.selectedNode)
		}
		selectedKeys = nodes[i].topologyKeys
		var ok bool
		if selected, ok = termFromLabels(nodes[i].labels, selectedKeys); !ok {
			return nil, fmt.Errorf("node %s lacks labels for its topology keys %v", req.selectedNode, selectedKeys)
		}
		if req.flags.strictTopology {
			if len(req.allowedTopologies) > 0 && !slices.ContainsFunc(flattenAllowed(req.allowedTopologies), func(t term) bool { return t.subsetOf(selected) }) {
				return nil, fmt.Errorf("selected node %s is not in allowed topologies", req.selectedNode)
			}
			// Strict: the selected node's topology and nothing else.
			requisite = []term{selected}
		}
	}

	if len(requisite) == 0 {
		switch {
		case len(req.allowedTopologies) > 0:
			requisite = flattenAllowed(req.allowedTopologies)
		case req.selectedNode == "" && !req.flags.immediateTopology:
			// Immediate binding, no allowedTopologies, and the driver is
			// not to be told where nodes are.
			return nil, nil
		default:
			// aggregateTopologies: the keys of the selected node, or under
			// Immediate binding of a random CSINode with keys (every node
			// here registers the same keys, so the pick does not matter),
			// then one term per Node carrying all of them.
			keys := selectedKeys
			if req.selectedNode == "" {
				for _, n := range nodes {
					if len(n.topologyKeys) > 0 {
						keys = n.topologyKeys
						break
					}
				}
				if len(keys) == 0 {
					return nil, errors.New("no available topology found")
				}
			}
			for _, n := range nodes {
				if t, ok := termFromLabels(n.labels, keys); ok && len(t) > 0 {
					requisite = append(requisite, t)
				}
			}
			if len(requisite) == 0 {
				return nil, fmt.Errorf("topology keys %v were not found on any node", keys)
			}
		}
	}
	if len(requisite) == 0 {
		return nil, nil
	}
	slices.SortFunc(requisite, compareTerms)
	requisite = slices.CompactFunc(requisite, func(a, b term) bool { return compareTerms(a, b) == 0 })

	var preferred []term
	switch {
	case req.selectedNode == "":
		preferred = rotate(requisite, int(spreadOffset(req.pvcName)%uint32(len(requisite))))
	case req.flags.strictTopology:
		preferred = requisite
	default:
		// Start at the first requisite term the selected node satisfies.
		i := slices.IndexFunc(requisite, func(t term) bool { return t.subsetOf(selected) })
		if i < 0 {
			return nil, fmt.Errorf("topology %v of selected node %s is not in requisite %v", selected, req.selectedNode, requisite)
		}
		preferred = rotate(requisite, i)
	}
	return &csi.TopologyRequirement{Requisite: toTopologies(requisite), Preferred: toTopologies(preferred)}, nil
}

func toTopologies(terms []term) []*csi.Topology {
	out := make([]*csi.Topology, 0, len(terms))
	for _, t := range terms {
		if len(t) == 0 {
			continue
		}
		seg := make(map[string]string, len(t))
		for _, s := range t {
			seg[s.key] = s.value
		}
		out = append(out, &csi.Topology{Segments: seg})
	}
	return out
}

// nodeFromInfo is how a node looks to the provisioner once its plugin
// registered: CSINode topology keys are NodeGetInfo's segment keys, and
// kubelet labels the Node with the segments. adminLabels are labels the
// cluster admin put on the Node (e.g. for a connection's `extra`).
func nodeFromInfo(info *csi.NodeGetInfoResponse, adminLabels map[string]string) k8sNode {
	seg := info.GetAccessibleTopology().GetSegments()
	labels := maps.Clone(adminLabels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, seg)
	return k8sNode{name: info.GetNodeId(), topologyKeys: slices.Sorted(maps.Keys(seg)), labels: labels}
}

// volumeAccessibleFrom reports whether a node can use a volume: the PV's
// node affinity is one term per accessible_topology entry (ORed), each
// requiring all of its segments as labels; no topology means everywhere.
// It is the check GenerateVolumeNodeAffinity + the scheduler perform.
func volumeAccessibleFrom(topology []*csi.Topology, n k8sNode) bool {
	if len(topology) == 0 {
		return true
	}
	for _, t := range topology {
		ok := true
		for k, v := range t.GetSegments() {
			if n.labels[k] != v {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}
