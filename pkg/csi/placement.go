package csi

import (
	"context"
	"errors"

	csi "github.com/container-storage-interface/spec/lib/go/csi"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
)

// Placement is accessible.Placement for loaded connections: the Driver
// makes every topology decision through it, and the topology dry run
// (`proxy-topology topology`) makes its prediction through the same
// methods, so the two cannot disagree. The decisions themselves are
// accessible's; this is the glue that finds a connection's compiled
// topology.
type Placement struct {
	// Topology is the proxy's accessibility options (prefix, node
	// topology type).
	Topology accessible.Options
	// Host is the node this controller runs on: its node id and segments.
	// A zero Host refuses node-local volumes (nothing to pin them to).
	Host accessible.Host
}

// placement is the Driver's Placement: its options and its node.
func (d *Driver) placement() Placement {
	return Placement{Topology: d.opts.Topology, Host: accessible.Host{Name: d.opts.NodeID, Segments: d.opts.NodeSegments}}
}

func (p Placement) pure() accessible.Placement { return accessible.Placement{Host: p.Host} }

// Decide is CreateVolume's topology decision for c (accessible.Placement.Decide).
func (p Placement) Decide(c *connection.Connection, req *csi.TopologyRequirement) (accessible.Decision, error) {
	return p.pure().Decide(c.Name, c.Topology(p.Topology), req.GetRequisite(), req.GetPreferred())
}

// Created is the accessible_topology of a volume c's upstream created
// for a CreateVolume decided as decision, given what the upstream
// answered (accessible.Placement.Created); an error is a refusal.
func (p Placement) Created(c *connection.Connection, decision accessible.Decision, upstream, requisite []*csi.Topology) (accessible.Decision, error) {
	return p.pure().Created(c.File, c.Topology(p.Topology), decision, upstream, requisite)
}

// Existing is the accessible_topology reported for an existing volume of
// c whose upstream reports upstream (accessible.Placement.Existing; its
// error is an accessible.UntranslatedError).
func (p Placement) Existing(c *connection.Connection, upstream []*csi.Topology) ([]*csi.Topology, error) {
	d, err := p.pure().Existing(c.Topology(p.Topology), upstream)
	return d.Topologies(), err
}

// Admits reports whether c can serve a volume accessible from topology
// (accessible.Placement.Admits).
func (p Placement) Admits(c *connection.Connection, topology *csi.Topology) bool {
	return p.pure().Admits(c.Topology(p.Topology), topology)
}

// Offers says where c serves volumes, for refusals.
func (p Placement) Offers(c *connection.Connection) string {
	return p.pure().Offers(c.Topology(p.Topology))
}

// Member is what ChooseMember needs of a group member: its topology.
// *connection.Connection (the dry run) and *backend.Conn (the server,
// which also holds the member's clients) are both.
type Member interface {
	Topology(accessible.Options) *accessible.Compiled
}

// ChooseMember is the member of group g a CreateVolume without a content
// source goes to (accessible.Placement.ChooseMember). member(i) finds
// member i (backend.Registry.Member for the server,
// connection.InspectMember for the dry run); it is asked once per member,
// only for the members the choice needs, and its error is mapped to a
// status as Get's are. The answer is the chosen member (as member
// returned it) and why it was chosen.
func ChooseMember[M Member](p Placement, g *connection.Connection, requisite, preferred []*csi.Topology, member func(i int) (M, error)) (M, string, error) {
	names := g.Members()
	members := make([]M, len(names))
	found := make([]bool, len(names))
	get := func(i int) (M, error) {
		if !found[i] {
			m, err := member(i)
			if err != nil {
				return m, ConnectionError(err)
			}
			members[i], found[i] = m, true
		}
		return members[i], nil
	}
	var none M
	choice, err := p.pure().ChooseMember(g.Name, names, requisite, preferred, func(i int) (*accessible.Compiled, error) {
		m, err := get(i)
		if err != nil {
			return nil, err
		}
		return m.Topology(p.Topology), nil
	})
	if err != nil {
		return none, "", err
	}
	// Without requirements the first member is chosen unasked.
	m, err := get(choice.Member)
	if err != nil {
		return none, "", err
	}
	return m, choice.Explain(names, requisite, preferred), nil
}

// decide, existingTopology and admits are the Driver's Placement at work.
func (d *Driver) decide(c *connection.Connection, req *csi.TopologyRequirement) (accessible.Decision, error) {
	return d.placement().Decide(c, req)
}

// existingTopology is what ControllerGetVolume and ListVolumes report for
// volume id of c. An upstream answer that does not translate is logged
// and the narrowest true report used in its place; when there is none the
// volume's topology is unknown, and the call fails with
// FAILED_PRECONDITION naming the connection and the volume (reporting
// none would say "everywhere"; SPEC §8, §13).
func (d *Driver) existingTopology(ctx context.Context, c *connection.Connection, id string, upstream []*csi.Topology) ([]*csi.Topology, error) {
	topology, err := d.placement().Existing(c, upstream)
	if err == nil {
		return topology, nil
	}
	var ue accessible.UntranslatedError
	if errors.As(err, &ue) && ue.Fallback {
		d.log.WarnContext(ctx, "the upstream's accessible_topology of an existing volume does not translate; reporting the connection's own",
			"connection", c.Name, "volume", id, "error", err)
		return topology, nil
	}
	return nil, status.Errorf(codes.FailedPrecondition, "connection %q: volume %q: %v", c.Name, id, err)
}

func (d *Driver) admits(c *connection.Connection, topology *csi.Topology) bool {
	return d.placement().Admits(c, topology)
}
