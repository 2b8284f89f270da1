package csiclient

import (
	"context"
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/spf13/cobra"
)

func (c *client) createSnapshotCommand() *cobra.Command {
	var name, source string
	params, secrets := kvFlag{}, kvFlag{}
	cmd := &cobra.Command{
		Use:   "create-snapshot --name N --source-volume ID",
		Short: "CreateSnapshot",
		Long: `Calls CreateSnapshot of --source-volume, on the volume's own connection (the
snapshot ID is s:<connection>/…).`,
		Example: "  proxy-topology csi create-snapshot --name snap-1 --source-volume v:nfs-zone1/vol-1",
		Args:    noArgs,
		RunE: c.run(func(ctx context.Context, _ []string) error {
			if name == "" || source == "" {
				return usagef("--name and --source-volume are required")
			}
			return unary(ctx, c, "CreateSnapshot", func(ctx context.Context) (*csi.CreateSnapshotResponse, error) {
				return c.controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: source, Parameters: params, Secrets: secrets})
			}, func(out io.Writer, resp *csi.CreateSnapshotResponse) {
				s := resp.GetSnapshot()
				fmt.Fprintf(out, "created snapshot %s of %s (size %s, ready_to_use=%t)\n", s.GetSnapshotId(), s.GetSourceVolumeId(), formatSize(s.GetSizeBytes()), s.GetReadyToUse())
			})
		}),
	}
	fs := cmd.Flags()
	fs.StringVar(&name, "name", "", "snapshot name (required)")
	fs.StringVar(&source, "source-volume", "", "volume ID to snapshot (required)")
	fs.Var(params, "param", "VolumeSnapshotClass parameter (repeatable)")
	fs.Var(secrets, "secret", "secret (repeatable)")
	return cmd
}

func (c *client) deleteSnapshotCommand() *cobra.Command {
	var snapshot string
	secrets := kvFlag{}
	cmd := &cobra.Command{
		Use:     "delete-snapshot --snapshot ID",
		Short:   "DeleteSnapshot",
		Long:    "Calls DeleteSnapshot. Deleting a snapshot that does not exist succeeds, as the CSI spec asks.",
		Example: "  proxy-topology csi delete-snapshot --snapshot s:nfs-zone1/snap-1",
		Args:    maxArgs(1),
		RunE: c.run(func(ctx context.Context, args []string) error {
			id, err := c.idArg("delete-snapshot", args, "snapshot", snapshot)
			if err != nil {
				return err
			}
			return unary(ctx, c, "DeleteSnapshot", func(ctx context.Context) (*csi.DeleteSnapshotResponse, error) {
				return c.controller.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: id, Secrets: secrets})
			}, func(out io.Writer, _ *csi.DeleteSnapshotResponse) {
				fmt.Fprintf(out, "deleted snapshot %s\n", id)
			})
		}),
	}
	cmd.Flags().StringVar(&snapshot, "snapshot", "", "snapshot ID (required)")
	cmd.Flags().Var(secrets, "secret", "secret (repeatable)")
	return cmd
}

func (c *client) listSnapshotsCommand() *cobra.Command {
	var maxEntries int
	var source, id string
	cmd := &cobra.Command{
		Use:   "list-snapshots [--max N] [--source-volume ID] [--snapshot-id ID]",
		Short: "ListSnapshots, following next_token to the end",
		Long: `Calls ListSnapshots until next_token is empty, optionally only for one
source volume or one snapshot ID. With -o json the output is one
ListSnapshotsResponse holding every page's entries.`,
		Example: "  proxy-topology csi list-snapshots --source-volume v:nfs-zone1/vol-1",
		Args:    noArgs,
		RunE: c.run(func(ctx context.Context, _ []string) error {
			if maxEntries < 0 || maxEntries > math.MaxInt32 {
				return usagef("--max %d is out of range", maxEntries)
			}
			all := &csi.ListSnapshotsResponse{}
			pages, err := listAll(func(tok string) (string, error) {
				resp, err := c.controller.ListSnapshots(ctx, &csi.ListSnapshotsRequest{MaxEntries: int32(maxEntries), StartingToken: tok, SourceVolumeId: source, SnapshotId: id})
				if err != nil {
					return "", rpcFailed("ListSnapshots", err)
				}
				all.Entries = append(all.Entries, resp.GetEntries()...)
				return resp.GetNextToken(), nil
			})
			if err != nil {
				return err
			}
			return c.emit(all, func(out io.Writer) {
				w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
				fmt.Fprintln(w, "SNAPSHOT ID\tSOURCE VOLUME\tSIZE\tREADY\tCREATED")
				for _, e := range all.GetEntries() {
					s := e.GetSnapshot()
					created := ""
					if t := s.GetCreationTime(); t != nil {
						created = t.AsTime().UTC().Format(time.RFC3339)
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%t\t%s\n", s.GetSnapshotId(), s.GetSourceVolumeId(), formatSize(s.GetSizeBytes()), s.GetReadyToUse(), created)
				}
				w.Flush()
				fmt.Fprintf(out, "%d %s (%d %s)\n", len(all.Entries), plural(len(all.Entries), "snapshot", "snapshots"), pages, plural(pages, "page", "pages"))
			})
		}),
	}
	fs := cmd.Flags()
	fs.IntVar(&maxEntries, "max", 0, "max_entries per page; every page is fetched")
	fs.StringVar(&source, "source-volume", "", "only snapshots of this volume ID")
	fs.StringVar(&id, "snapshot-id", "", "only this snapshot ID")
	return cmd
}
