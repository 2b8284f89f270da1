package csi

import (
	"context"
	"math"

	csi "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/democratic-csi/proxy-topology/pkg/backend"
)

// GetCapacity answers 0 for a topology the connection cannot serve, the
// maximum for an upstream that does not report capacity (seed behaviour:
// "infinite"), and the upstream's answer otherwise. A request that names
// no connection, with no proxy.defaultConnection, is answered 0 (SPEC §6):
// the proxy cannot know which storage is meant, and COs (csi-sanity, the
// external-provisioner's capacity tracking for a class without
// parameters) ask so and expect an answer, not an error.
func (d *Driver) GetCapacity(ctx context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	if d.connectionName(req.GetParameters()) == "" {
		return &csi.GetCapacityResponse{AvailableCapacity: 0}, nil
	}
	c, release, err := d.connectionFromParameters(ctx, req.GetParameters())
	if err != nil {
		return nil, err
	}
	defer release()
	if c.IsGroup() {
		return d.groupCapacity(ctx, c, req)
	}
	return d.connectionCapacity(ctx, c, req)
}

// connectionCapacity is GetCapacity for one ordinary connection.
func (d *Driver) connectionCapacity(ctx context.Context, c *backend.Conn, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	if !d.admits(c.Connection, req.GetAccessibleTopology()) {
		return &csi.GetCapacityResponse{AvailableCapacity: 0}, nil
	}
	ok, err := controllerHas(ctx, c, csi.ControllerServiceCapability_RPC_GET_CAPACITY)
	if err != nil {
		return nil, err
	}
	if !ok {
		return &csi.GetCapacityResponse{AvailableCapacity: math.MaxInt64}, nil
	}
	out := outbound(req)
	out.Parameters = mergeParameters(c.Config.CSI.Parameters, req.GetParameters())
	// In the upstream's keys where the connection maps them (SPEC §13),
	// else none: the proxy's keys mean nothing to it.
	out.AccessibleTopology = c.Topology(d.opts.Topology).Upstream().Term(req.GetAccessibleTopology())
	return forward(ctx, c, c.Controller, "GetCapacity", out, c.Controller.Controller.GetCapacity)
}
