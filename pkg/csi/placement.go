package csi

import (
	"fmt"

	csi "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
)

// Placement is where a controller lets a connection's volumes be: the
// topology decisions of CreateVolume, GetCapacity and the reports of
// existing volumes, and a group's member choice (SPEC §11). The Driver
// makes every such decision through it, and the topology dry run
// (`proxy-topology topology`) makes its prediction through the same
// methods, so the two cannot disagree.
//
// Node-local connections (SPEC §12): a local-hostpath connection without
// a topology list keeps its volumes on the disk of the node whose
// controller serves the call, so every decision about where its volumes
// are accessible is made from Host (the proxy's own choice, whatever the
// node topology type), never from the connection's (empty) topology list.
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

// Decide is CreateVolume's topology decision for c: a node-local
// connection is pinned to Host (or refused for another node), any other
// connection is decided by its topology list.
func (p Placement) Decide(c *connection.Connection, req *csi.TopologyRequirement) (accessible.Decision, error) {
	if c.NodeLocal(p.Topology) {
		return p.Topology.DecideNodeLocal(c.Name, p.Host, req.GetRequisite(), req.GetPreferred())
	}
	return c.Topology(p.Topology).Decide(c.Name, req.GetRequisite(), req.GetPreferred())
}

// Existing is the accessible_topology reported for an existing volume of
// c (ControllerGetVolume, ListVolumes): for a node-local connection the
// node serving the call, which holds every volume it can see; otherwise
// the connection's whole topology.
func (p Placement) Existing(c *connection.Connection) []*csi.Topology {
	if c.NodeLocal(p.Topology) {
		if p.Host.Name == "" {
			return nil // nothing to pin to; CreateVolume refuses such volumes
		}
		return p.Topology.Pin(p.Host).Topologies()
	}
	return c.Topology(p.Topology).All().Topologies()
}

// Admits reports whether c can serve a volume accessible from topology
// (GetCapacity, a group's member choice). A node-local connection serves
// only Host.
func (p Placement) Admits(c *connection.Connection, topology *csi.Topology) bool {
	if c.NodeLocal(p.Topology) {
		return p.Topology.AdmitsHost(p.Host, topology)
	}
	return c.Topology(p.Topology).Admits(topology)
}

// Offers says where c serves volumes, for refusals.
func (p Placement) Offers(c *connection.Connection) string {
	if c.NodeLocal(p.Topology) {
		return fmt.Sprintf("node %q only (node-local)", p.Host.Name)
	}
	return c.Topology(p.Topology).Offers()
}

// ChooseMember is the member of group g a CreateVolume without a content
// source goes to: accessible.Choose over the members in order, each
// admitting a term as Admits says. member(i) finds member i
// (backend.Registry.Member for the server, connection.InspectMember for
// the dry run); it is asked once per member, only for the members the
// choice needs, and its error is mapped to a status as Get's are. The
// answer is the chosen member (as member returned it) and why it was
// chosen; when none admits the request, RESOURCE_EXHAUSTED lists each
// member and what it offers.
func (p Placement) ChooseMember(g *connection.Connection, requisite, preferred []*csi.Topology, member func(i int) (*connection.Connection, error)) (*connection.Connection, string, error) {
	names := g.Members()
	members := make([]*connection.Connection, len(names))
	get := func(i int) (*connection.Connection, error) {
		if members[i] == nil {
			m, err := member(i)
			if err != nil {
				return nil, storeError(err)
			}
			members[i] = m
		}
		return members[i], nil
	}
	choice, ok, err := accessible.Choose(len(names), func(i int, term *csi.Topology) (bool, error) {
		m, err := get(i)
		if err != nil {
			return false, err
		}
		return p.Admits(m, term), nil
	}, requisite, preferred)
	if err != nil {
		return nil, "", err
	}
	if !ok {
		// Every member was asked about every term, so all are loaded.
		offers := make([]string, len(names))
		for i := range names {
			m, err := get(i)
			if err != nil {
				return nil, "", err
			}
			offers[i] = p.Offers(m)
		}
		return nil, "", accessible.NoMemberError(g.Name, names, offers, requisite, preferred)
	}
	m, err := get(choice.Member)
	if err != nil {
		return nil, "", err
	}
	return m, choice.Explain(names, requisite, preferred), nil
}

// decide, existingTopology and admits are the Driver's Placement at work.
func (d *Driver) decide(c *connection.Connection, req *csi.TopologyRequirement) (accessible.Decision, error) {
	return d.placement().Decide(c, req)
}

func (d *Driver) existingTopology(c *connection.Connection) []*csi.Topology {
	return d.placement().Existing(c)
}

func (d *Driver) admits(c *connection.Connection, topology *csi.Topology) bool {
	return d.placement().Admits(c, topology)
}
