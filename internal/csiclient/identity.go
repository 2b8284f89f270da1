package csiclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

func (c *client) infoCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "info",
		Short: "Plugin name, version, capabilities and Probe",
		Long: `Calls GetPluginInfo, GetPluginCapabilities, Probe, ControllerGetCapabilities
and NodeGetCapabilities. A process that serves only the controller or only
the node service answers UNIMPLEMENTED for the other; that is shown as "not
served", not as a failure.`,
		Example: "  proxy-topology csi info\n  proxy-topology csi -o json info",
		Args:    noArgs,
		RunE:    c.run(c.info),
	}
}

func (c *client) info(ctx context.Context, _ []string) error {
	pi, err := c.identity.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil {
		return rpcFailed("GetPluginInfo", err)
	}
	pc, err := c.identity.GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
	if err != nil {
		return rpcFailed("GetPluginCapabilities", err)
	}
	probe, err := c.identity.Probe(ctx, &csi.ProbeRequest{})
	if err != nil {
		return rpcFailed("Probe", err)
	}
	// A node-only or controller-only process does not serve the other
	// service: UNIMPLEMENTED there is an answer, not a failure.
	cc, err := c.controller.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil && status.Code(err) != codes.Unimplemented {
		return rpcFailed("ControllerGetCapabilities", err)
	}
	nc, err := c.node.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
	if err != nil && status.Code(err) != codes.Unimplemented {
		return rpcFailed("NodeGetCapabilities", err)
	}

	if c.output == "json" {
		out := map[string]json.RawMessage{}
		for k, m := range map[string]proto.Message{
			"pluginInfo": pi, "pluginCapabilities": pc, "probe": probe,
			"controllerCapabilities": cc, "nodeCapabilities": nc,
		} {
			if m == nil || !m.ProtoReflect().IsValid() {
				out[k] = json.RawMessage("null")
				continue
			}
			b, err := protojson.Marshal(m)
			if err != nil {
				return err
			}
			out[k] = b
		}
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintln(c.stdout, string(b))
		return nil
	}
	var plugin []string
	for _, x := range pc.GetCapabilities() {
		switch {
		case x.GetService() != nil:
			plugin = append(plugin, x.GetService().GetType().String())
		case x.GetVolumeExpansion() != nil:
			plugin = append(plugin, "VOLUME_EXPANSION_"+x.GetVolumeExpansion().GetType().String())
		}
	}
	w := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "name:\t%s\n", pi.GetName())
	fmt.Fprintf(w, "version:\t%s\n", pi.GetVendorVersion())
	ready := "unknown (Probe did not say)"
	if probe.GetReady() != nil {
		ready = strconv.FormatBool(probe.GetReady().GetValue())
	}
	fmt.Fprintf(w, "ready:\t%s\n", ready)
	fmt.Fprintf(w, "plugin capabilities:\t%s\n", strings.Join(plugin, ", "))
	if cc == nil {
		fmt.Fprintf(w, "controller capabilities:\t(controller service not served)\n")
	} else {
		var caps []csi.ControllerServiceCapability_RPC_Type
		for _, x := range cc.GetCapabilities() {
			caps = append(caps, x.GetRpc().GetType())
		}
		fmt.Fprintf(w, "controller capabilities:\t%s\n", enumList(caps))
	}
	if nc == nil {
		fmt.Fprintf(w, "node capabilities:\t(node service not served)\n")
	} else {
		var caps []csi.NodeServiceCapability_RPC_Type
		for _, x := range nc.GetCapabilities() {
			caps = append(caps, x.GetRpc().GetType())
		}
		fmt.Fprintf(w, "node capabilities:\t%s\n", enumList(caps))
	}
	return w.Flush()
}

func (c *client) nodeInfoCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "node-info",
		Short: "NodeGetInfo: the node id and the topology the node reports",
		Long: `Calls NodeGetInfo: the node id, the volume limit and the segments the node
reports (what kubelet puts on the node as topology labels). It fails with
FAILED_PRECONDITION when no rule yields a segment; "proxy-topology topology"
shows why.`,
		Example: "  proxy-topology csi node-info",
		Args:    noArgs,
		RunE: c.run(func(ctx context.Context, _ []string) error {
			return unary(ctx, c, "NodeGetInfo", func(ctx context.Context) (*csi.NodeGetInfoResponse, error) {
				return c.node.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
			}, printNodeInfo)
		}),
	}
}

func printNodeInfo(out io.Writer, resp *csi.NodeGetInfoResponse) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "node_id:\t%s\n", resp.GetNodeId())
	maxVols := strconv.FormatInt(resp.GetMaxVolumesPerNode(), 10)
	if resp.GetMaxVolumesPerNode() == 0 {
		maxVols = "0 (no limit)"
	}
	fmt.Fprintf(w, "max_volumes_per_node:\t%s\n", maxVols)
	fmt.Fprintf(w, "accessible_topology:\t%s\n", formatMap(resp.GetAccessibleTopology().GetSegments()))
	w.Flush()
}
