package csiclient

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/spf13/cobra"

	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
)

func (c *client) createVolumeCommand() *cobra.Command {
	var (
		name, connection, srcSnap, srcVol string
		size, limit                       sizeFlag
		params, secrets                   = kvFlag{}, kvFlag{}
		requisite, preferred              termsFlag
		vc                                capFlags
	)
	cmd := &cobra.Command{
		Use:   "create-volume --name N [--connection C] [--param k=v]… [--requisite k=v,…]… [--preferred k=v,…]… [--size 1Gi]",
		Short: "CreateVolume: create a volume on a connection",
		Long: `Calls CreateVolume as the external-provisioner would for a claim:
--connection (or --param connection=C) picks the connection, --requisite
and --preferred are the claim's topology requirement (requisite terms are
ORed; preferred ones are in order).`,
		Example: `  proxy-topology csi create-volume --name pvc-1 --connection local --size 1Gi
  proxy-topology csi create-volume --name pvc-2 --connection nfs-zone1 --requisite zone=zone2 --requisite zone=zone1 --preferred zone=zone2
  proxy-topology csi create-volume --name pvc-3 --connection nfs-zone1 --source-snapshot s:nfs-zone1/snap-1`,
		Args: noArgs,
		RunE: c.run(func(ctx context.Context, _ []string) error {
			if name == "" {
				return usagef("--name is required")
			}
			if connection != "" {
				params[pcsi.ConnectionParameter] = connection
			}
			vcap, err := vc.capability()
			if err != nil {
				return err
			}
			req := &csi.CreateVolumeRequest{
				Name: name, Parameters: params, Secrets: secrets, VolumeCapabilities: []*csi.VolumeCapability{vcap},
			}
			if size > 0 || limit > 0 {
				req.CapacityRange = &csi.CapacityRange{RequiredBytes: int64(size), LimitBytes: int64(limit)}
			}
			reqTerms, err := requisite.terms("requisite", c.prefix)
			if err != nil {
				return err
			}
			prefTerms, err := preferred.terms("preferred", c.prefix)
			if err != nil {
				return err
			}
			if len(reqTerms) > 0 || len(prefTerms) > 0 {
				req.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: reqTerms, Preferred: prefTerms}
			}
			switch {
			case srcSnap != "" && srcVol != "":
				return usagef("--source-snapshot and --source-volume exclude each other")
			case srcSnap != "":
				req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: srcSnap}}}
			case srcVol != "":
				req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: srcVol}}}
			}
			return unary(ctx, c, "CreateVolume", func(ctx context.Context) (*csi.CreateVolumeResponse, error) {
				return c.controller.CreateVolume(ctx, req)
			}, func(out io.Writer, resp *csi.CreateVolumeResponse) {
				fmt.Fprintf(out, "created volume %s\n", resp.GetVolume().GetVolumeId())
				printVolume(out, resp.GetVolume())
			})
		}),
	}
	fs := cmd.Flags()
	fs.StringVar(&name, "name", "", "volume name (required; the CO uses the PVC's pvc-<uid>)")
	fs.StringVar(&connection, "connection", "", "sets --param connection=C")
	fs.Var(params, "param", "StorageClass parameter (repeatable)")
	fs.Var(secrets, "secret", "secret (repeatable)")
	fs.Var(&requisite, "requisite", "requisite topology term (repeatable; terms are ORed)")
	fs.Var(&preferred, "preferred", "preferred topology term (repeatable, in order)")
	fs.Var(&size, "size", "required_bytes, e.g. 1Gi")
	fs.Var(&limit, "limit", "limit_bytes, e.g. 2Gi")
	fs.StringVar(&srcSnap, "source-snapshot", "", "restore from this snapshot ID")
	fs.StringVar(&srcVol, "source-volume", "", "clone this volume ID")
	vc.add(fs)
	return cmd
}

func (c *client) deleteVolumeCommand() *cobra.Command {
	var volume string
	secrets := kvFlag{}
	cmd := &cobra.Command{
		Use:     "delete-volume --volume ID",
		Short:   "DeleteVolume",
		Long:    "Calls DeleteVolume. Deleting a volume that does not exist succeeds, as the CSI spec asks.",
		Example: "  proxy-topology csi delete-volume --volume v:nfs-zone1/vol-1",
		Args:    maxArgs(1),
		RunE: c.run(func(ctx context.Context, args []string) error {
			id, err := c.idArg("delete-volume", args, "volume", volume)
			if err != nil {
				return err
			}
			return unary(ctx, c, "DeleteVolume", func(ctx context.Context) (*csi.DeleteVolumeResponse, error) {
				return c.controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: secrets})
			}, func(out io.Writer, _ *csi.DeleteVolumeResponse) { fmt.Fprintf(out, "deleted volume %s\n", id) })
		}),
	}
	cmd.Flags().StringVar(&volume, "volume", "", "volume ID (required)")
	cmd.Flags().Var(secrets, "secret", "secret (repeatable)")
	return cmd
}

func (c *client) getVolumeCommand() *cobra.Command {
	var volume string
	cmd := &cobra.Command{
		Use:   "get-volume --volume ID",
		Short: "ControllerGetVolume: a volume's capacity, topology and where it is published",
		Long: `Calls ControllerGetVolume. An ID the proxy did not make (not v:<connection>/…)
is NOT_FOUND.`,
		Example: "  proxy-topology csi get-volume --volume v:nfs-zone1/vol-1",
		Args:    maxArgs(1),
		RunE: c.run(func(ctx context.Context, args []string) error {
			id, err := c.idArg("get-volume", args, "volume", volume)
			if err != nil {
				return err
			}
			return unary(ctx, c, "ControllerGetVolume", func(ctx context.Context) (*csi.ControllerGetVolumeResponse, error) {
				return c.controller.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: id})
			}, func(out io.Writer, resp *csi.ControllerGetVolumeResponse) {
				fmt.Fprintf(out, "volume %s\n", resp.GetVolume().GetVolumeId())
				printVolume(out, resp.GetVolume())
				if ids := resp.GetStatus().GetPublishedNodeIds(); len(ids) > 0 {
					fmt.Fprintf(out, "  published_node_ids:   %s\n", strings.Join(ids, ", "))
				}
			})
		}),
	}
	cmd.Flags().StringVar(&volume, "volume", "", "volume ID (required)")
	return cmd
}

func (c *client) expandVolumeCommand() *cobra.Command {
	var volume string
	var size sizeFlag
	secrets := kvFlag{}
	cmd := &cobra.Command{
		Use:   "expand-volume --volume ID --size S",
		Short: "ControllerExpandVolume",
		Long: `Calls ControllerExpandVolume with --size as required_bytes and prints the new
capacity and whether the node must expand the file system too.`,
		Example: "  proxy-topology csi expand-volume --volume v:nfs-zone1/vol-1 --size 2Gi",
		Args:    maxArgs(1),
		RunE: c.run(func(ctx context.Context, args []string) error {
			id, err := c.idArg("expand-volume", args, "volume", volume)
			if err != nil {
				return err
			}
			if size == 0 {
				return usagef("--size is required")
			}
			return unary(ctx, c, "ControllerExpandVolume", func(ctx context.Context) (*csi.ControllerExpandVolumeResponse, error) {
				return c.controller.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{
					VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: int64(size)}, Secrets: secrets})
			}, func(out io.Writer, resp *csi.ControllerExpandVolumeResponse) {
				fmt.Fprintf(out, "expanded volume %s to %s; node expansion required: %t\n", id, sizeText(resp.GetCapacityBytes()), resp.GetNodeExpansionRequired())
			})
		}),
	}
	cmd.Flags().StringVar(&volume, "volume", "", "volume ID (required)")
	cmd.Flags().Var(&size, "size", "new required_bytes, e.g. 2Gi (required)")
	cmd.Flags().Var(secrets, "secret", "secret (repeatable)")
	return cmd
}

func (c *client) listVolumesCommand() *cobra.Command {
	var maxEntries int
	cmd := &cobra.Command{
		Use:   "list-volumes [--max N]",
		Short: "ListVolumes, following next_token to the end",
		Long: `Calls ListVolumes until next_token is empty and prints every entry, then
how many pages it took; --max is the page size. With -o json the output is
one ListVolumesResponse holding every page's entries.`,
		Example: "  proxy-topology csi list-volumes\n  proxy-topology csi -o json list-volumes | jq -r '.entries[].volume.volumeId'",
		Args:    noArgs,
		RunE: c.run(func(ctx context.Context, _ []string) error {
			if maxEntries < 0 || maxEntries > math.MaxInt32 {
				return usagef("--max %d is out of range", maxEntries)
			}
			all := &csi.ListVolumesResponse{}
			pages, err := listAll(func(tok string) (string, error) {
				resp, err := c.controller.ListVolumes(ctx, &csi.ListVolumesRequest{MaxEntries: int32(maxEntries), StartingToken: tok})
				if err != nil {
					return "", rpcFailed("ListVolumes", err)
				}
				all.Entries = append(all.Entries, resp.GetEntries()...)
				return resp.GetNextToken(), nil
			})
			if err != nil {
				return err
			}
			return c.emit(all, func(out io.Writer) {
				w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
				fmt.Fprintln(w, "VOLUME ID\tCAPACITY\tACCESSIBLE TOPOLOGY\tPUBLISHED ON")
				for _, e := range all.GetEntries() {
					v := e.GetVolume()
					top := "everywhere"
					if len(v.GetAccessibleTopology()) > 0 {
						top = FormatTerms(v.GetAccessibleTopology())
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", v.GetVolumeId(), formatSize(v.GetCapacityBytes()),
						top, strings.Join(e.GetStatus().GetPublishedNodeIds(), ","))
				}
				w.Flush()
				fmt.Fprintf(out, "%d %s (%d %s)\n", len(all.Entries), plural(len(all.Entries), "volume", "volumes"), pages, plural(pages, "page", "pages"))
			})
		}),
	}
	cmd.Flags().IntVar(&maxEntries, "max", 0, "max_entries per page; every page is fetched (0: the driver's choice)")
	return cmd
}

func (c *client) getCapacityCommand() *cobra.Command {
	var (
		connection string
		params     = kvFlag{}
		topology   termsFlag
		vc         capFlags
		withCap    bool
	)
	cmd := &cobra.Command{
		Use:   "get-capacity [--connection C] [--param k=v]… [--topology k=v,…]",
		Short: "GetCapacity: what a connection offers in one place",
		Long: `Calls GetCapacity as the external-provisioner's capacity tracking does. Where
the connection's topology does not reach, the proxy answers 0; a driver
that does not report capacity shows as unlimited.`,
		Example: "  proxy-topology csi get-capacity --connection nfs-zone1 --topology zone=zone1",
		Args:    noArgs,
		RunE: c.run(func(ctx context.Context, _ []string) error {
			if len(topology) > 1 {
				return usagef("--topology takes one term; GetCapacity asks about one place")
			}
			terms, err := topology.terms("topology", c.prefix)
			if err != nil {
				return err
			}
			if connection != "" {
				params[pcsi.ConnectionParameter] = connection
			}
			req := &csi.GetCapacityRequest{Parameters: params}
			if len(terms) == 1 {
				req.AccessibleTopology = terms[0]
			}
			if withCap {
				vcap, err := vc.capability()
				if err != nil {
					return err
				}
				req.VolumeCapabilities = []*csi.VolumeCapability{vcap}
			}
			return unary(ctx, c, "GetCapacity", func(ctx context.Context) (*csi.GetCapacityResponse, error) {
				return c.controller.GetCapacity(ctx, req)
			}, printCapacity)
		}),
	}
	fs := cmd.Flags()
	fs.StringVar(&connection, "connection", "", "sets --param connection=C")
	fs.Var(params, "param", "StorageClass parameter (repeatable)")
	fs.Var(&topology, "topology", "accessible_topology (one term)")
	fs.BoolVar(&withCap, "with-capability", false, "send a volume capability built from --access-mode/--fs-type/--block")
	vc.add(fs)
	return cmd
}

func printCapacity(out io.Writer, resp *csi.GetCapacityResponse) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	avail := sizeText(resp.GetAvailableCapacity())
	switch resp.GetAvailableCapacity() {
	case math.MaxInt64:
		avail = "unlimited (the connection's driver does not report capacity)"
	case 0:
		avail = "0"
	}
	fmt.Fprintf(w, "available_capacity:\t%s\n", avail)
	if m := resp.GetMaximumVolumeSize(); m != nil {
		fmt.Fprintf(w, "maximum_volume_size:\t%s\n", sizeText(m.GetValue()))
	}
	if m := resp.GetMinimumVolumeSize(); m != nil {
		fmt.Fprintf(w, "minimum_volume_size:\t%s\n", sizeText(m.GetValue()))
	}
	w.Flush()
}

// listAll calls page with each next_token in turn, from "", until a page
// hands back none; it returns how many pages were read. The listing
// commands share it, so they page alike.
func listAll(page func(token string) (next string, err error)) (int, error) {
	pages := 0
	for tok := ""; ; {
		next, err := page(tok)
		if err != nil {
			return pages, err
		}
		pages++
		if next == "" {
			return pages, nil
		}
		tok = next
	}
}
