package csi

import (
	csi "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
)

// Node-local connections (SPEC §12): a local-hostpath connection without a
// topology list keeps its volumes on the disk of the node whose controller
// serves the call, so every decision about where its volumes are
// accessible is made from that node (the proxy's own choice, whatever the
// node topology type), never from the connection's (empty) topology list.

// host is the node this controller runs on, as node-local decisions see it.
func (d *Driver) host() accessible.Host {
	return accessible.Host{Name: d.opts.NodeID, Segments: d.opts.NodeSegments}
}

// decide is CreateVolume's topology decision for c.
func (d *Driver) decide(c *connection.Connection, req *csi.TopologyRequirement) (accessible.Decision, error) {
	if c.NodeLocal() {
		return d.opts.Topology.DecideNodeLocal(c.Name, d.host(), req.GetRequisite(), req.GetPreferred())
	}
	return c.Topology(d.opts.Topology).Decide(c.Name, req.GetRequisite(), req.GetPreferred())
}

// existingTopology is the accessible_topology reported for an existing
// volume of c (ControllerGetVolume, ListVolumes): for a node-local
// connection the node serving the call, which holds every volume it can
// see; otherwise the connection's whole topology.
func (d *Driver) existingTopology(c *connection.Connection) []*csi.Topology {
	if c.NodeLocal() {
		if d.opts.NodeID == "" {
			return nil // nothing to pin to; CreateVolume refuses such volumes
		}
		return d.opts.Topology.Pin(d.host()).Topologies()
	}
	return c.Topology(d.opts.Topology).All().Topologies()
}

// admits is GetCapacity's check: can c serve a volume accessible from
// topology? A node-local connection serves only its own node.
func (d *Driver) admits(c *connection.Connection, topology *csi.Topology) bool {
	if c.NodeLocal() {
		return d.opts.Topology.AdmitsHost(d.host(), topology)
	}
	return c.Topology(d.opts.Topology).Admits(topology)
}
