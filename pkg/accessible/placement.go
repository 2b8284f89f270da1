package accessible

import (
	"fmt"

	csi "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/democratic-csi/proxy-topology/pkg/labels"
)

// Placement is where a controller lets a connection's volumes be: the
// topology decisions of CreateVolume, GetCapacity and the reports of
// existing volumes, and a group's member choice (SPEC §11). pkg/csi makes
// every such decision through it, and the topology dry run (`proxy-topology
// topology`) makes its prediction through the same methods, so the two
// cannot disagree.
//
// Node-local connections (Compiled.NodeLocal, SPEC §12, §13) keep their
// volumes on the disk of the node whose controller serves the call, so
// every decision about where their volumes are accessible is made from
// Host (the proxy's own choice, whatever the node topology type), never
// from the connection's (empty) topology list.
type Placement struct {
	// Host is the node this controller runs on: its node id and segments.
	// A zero Host refuses node-local volumes (nothing to pin them to).
	Host Host
}

// Decide is CreateVolume's topology decision for the connection named
// name (in messages) with topology t: a node-local connection is pinned
// to Host (or refused for another node), any other connection is decided
// by its topology list.
func (p Placement) Decide(name string, t *Compiled, requisite, preferred []*csi.Topology) (Decision, error) {
	if t.NodeLocal() {
		return t.Options().DecideNodeLocal(name, p.Host, requisite, preferred)
	}
	return t.Decide(name, requisite, preferred)
}

// Existing is the accessible_topology reported for an existing volume
// (ControllerGetVolume, ListVolumes) whose upstream reports upstream: a
// connection with upstreamTopology reports the upstream's answer
// translated (Compiled.Answer without requirements), when it translates;
// otherwise a node-local connection reports the node serving the call,
// which holds every volume it can see, and any other connection its whole
// topology (the proxy keeps no record of what CreateVolume chose).
//
// An upstream answer that does not translate is never widened: the error
// is an UntranslatedError carrying the narrowest report that is still
// true, when there is one (the node pin of a node-local connection, the
// declared topology list), for the caller to log and use; a mapped
// connection with neither (no list; node-local without a node name) has
// no true report to give (it would read "everywhere"), and the caller
// fails the call.
func (p Placement) Existing(t *Compiled, upstream []*csi.Topology) (Decision, error) {
	var cause error
	if len(upstream) > 0 && !t.upstream.Empty() {
		d, err := t.Answer(upstream, nil)
		if err == nil {
			return d, nil
		}
		cause = err
	}
	var d Decision
	if t.NodeLocal() {
		if p.Host.Name != "" && labels.ValueError(p.Host.Name) == nil {
			d = t.Options().Pin(p.Host)
		} // else nothing to pin to; CreateVolume refuses such volumes (NodeNameError)
	} else {
		d = t.All()
	}
	switch {
	case cause == nil:
		return d, nil
	case d.Everywhere(): // no pin, no list: reporting it would widen
		return Decision{}, UntranslatedError{Cause: cause}
	}
	return d, UntranslatedError{Cause: cause, Fallback: true}
}

// UntranslatedError is an existing volume's upstream answer that does not
// translate (Placement.Existing). With Fallback, the Decision returned
// with it is still true (the node pin, the declared topology) and may be
// reported; without, nothing may be.
type UntranslatedError struct {
	Cause    error
	Fallback bool
}

func (e UntranslatedError) Error() string {
	if e.Fallback {
		return e.Cause.Error()
	}
	return e.Cause.Error() + "; the connection declares no proxy.perDriver.topology (and, node-local, knows no node name) to report instead, so the volume's topology is unknown"
}

func (e UntranslatedError) Unwrap() error { return e.Cause }

// Admits reports whether a connection with topology t can serve a volume
// accessible from topology (GetCapacity, a group's member choice). A
// node-local connection serves only Host.
func (p Placement) Admits(t *Compiled, topology *csi.Topology) bool {
	if t.NodeLocal() {
		return t.Options().AdmitsHost(p.Host, topology)
	}
	return t.Admits(topology)
}

// Offers says where a connection with topology t serves volumes, for
// refusals.
func (p Placement) Offers(t *Compiled) string {
	if t.NodeLocal() {
		return fmt.Sprintf("node %q only (node-local)", p.Host.Name)
	}
	return t.Offers()
}

// ChooseMember is the member of group group (members names) a
// CreateVolume without a content source goes to: Choose over the members
// in order, each admitting a term as Admits says. member(i) is member i's
// topology; it is asked once per member, only for the members the choice
// needs, and its error is returned as it is. When none admits the
// request, the error is NoMemberError, listing each member and what it
// offers.
func (p Placement) ChooseMember(group string, names []string, requisite, preferred []*csi.Topology, member func(i int) (*Compiled, error)) (Choice, error) {
	topologies := make([]*Compiled, len(names))
	get := func(i int) (*Compiled, error) {
		if topologies[i] == nil {
			t, err := member(i)
			if err != nil {
				return nil, err
			}
			topologies[i] = t
		}
		return topologies[i], nil
	}
	choice, ok, err := Choose(len(names), func(i int, term *csi.Topology) (bool, error) {
		t, err := get(i)
		if err != nil {
			return false, err
		}
		return p.Admits(t, term), nil
	}, requisite, preferred)
	if err != nil {
		return Choice{Member: -1}, err
	}
	if !ok {
		// Every member was asked about every term, so all are known.
		offers := make([]string, len(names))
		for i := range names {
			t, err := get(i)
			if err != nil {
				return Choice{Member: -1}, err
			}
			offers[i] = p.Offers(t)
		}
		return Choice{Member: -1}, NoMemberError(group, names, offers, requisite, preferred)
	}
	return choice, nil
}
