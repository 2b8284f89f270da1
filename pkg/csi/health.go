package csi

import (
	"context"

	csi "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/democratic-csi/proxy-topology/pkg/backend"
	"github.com/democratic-csi/proxy-topology/pkg/ids"
)

// ControllerGetVolumeHealth routes by volume ID.
func (d *Driver) ControllerGetVolumeHealth(ctx context.Context, req *csi.ControllerGetVolumeHealthRequest) (*csi.ControllerGetVolumeHealthResponse, error) {
	t, release, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	defer release()
	c := t.conn
	if err := requireController(ctx, c, csi.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH, "ControllerGetVolumeHealth"); err != nil {
		return nil, err
	}
	out := outbound(req)
	out.VolumeId = t.handle
	out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
	resp, err := forward(ctx, c, c.Controller, "ControllerGetVolumeHealth", out, c.Controller.Controller.ControllerGetVolumeHealth)
	if err != nil {
		return nil, err
	}
	if h := resp.GetVolumeHealth(); h != nil {
		h.VolumeId = req.GetVolumeId()
	}
	return resp, nil
}

// NodeGetVolumeHealth routes by volume ID to the node upstream.
func (d *Driver) NodeGetVolumeHealth(ctx context.Context, req *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	t, release, err := d.routeVolume(ctx, "volume_id", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	defer release()
	c := t.conn
	if err := requireNode(ctx, c, csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH, "NodeGetVolumeHealth"); err != nil {
		return nil, err
	}
	out := outbound(req)
	out.VolumeId = t.handle
	if out.StagingTargetPath, err = upstreamStagingPath(ctx, c, req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	resp, err := forward(ctx, c, c.Node, "NodeGetVolumeHealth", out, c.Node.Node.NodeGetVolumeHealth)
	if err != nil {
		return nil, err
	}
	if h := resp.GetVolumeHealth(); h != nil {
		h.VolumeId = req.GetVolumeId()
	}
	return resp, nil
}

// ControllerListVolumeHealth lists volume health across connections.
func (d *Driver) ControllerListVolumeHealth(ctx context.Context, req *csi.ControllerListVolumeHealthRequest) (*csi.ControllerListVolumeHealthResponse, error) {
	entries, next, err := fanOut(ctx, d, csi.ControllerServiceCapability_RPC_LIST_VOLUME_HEALTH, "ControllerListVolumeHealth", req.GetMaxEntries(), req.GetStartingToken(),
		func(ctx context.Context, c *backend.Conn, max int32, tok string) ([]*csi.VolumeHealth, string, error) {
			resp, err := forward(ctx, c, c.Controller, "ControllerListVolumeHealth", &csi.ControllerListVolumeHealthRequest{
				MaxEntries: max, StartingToken: tok, Secrets: merge(c.Config.CSI.Secrets, req.GetSecrets()),
			}, c.Controller.Controller.ControllerListVolumeHealth)
			if err != nil {
				return nil, "", err
			}
			out := resp.GetEntries()[:0]
			for _, h := range resp.GetEntries() {
				id, err := d.encodeID(ctx, ids.Volume, c, h.GetVolumeId())
				if err != nil {
					d.log.WarnContext(ctx, "listing volume health: upstream volume cannot get a proxy id; left out", "connection", c.Name, "error", err)
					continue
				}
				h.VolumeId = id
				out = append(out, h)
			}
			return out, resp.GetNextToken(), nil
		})
	if err != nil {
		return nil, err
	}
	return &csi.ControllerListVolumeHealthResponse{Entries: entries, NextToken: next}, nil
}
