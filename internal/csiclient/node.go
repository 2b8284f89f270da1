package csiclient

import (
	"context"
	"fmt"
	"io"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
)

// nodeLong is the help every node command shares: they act in the
// caller's mount namespace.
const nodeLong = `Run it in the node plugin's container: paths are in its mount namespace.`

// nodeFlags are what the node commands share; stage and publish also send
// a volume capability, contexts and secrets.
type nodeFlags struct {
	volume                string
	volumeCtx, publishCtx kvFlag
	secrets               kvFlag
	vc                    capFlags
}

func (n *nodeFlags) add(fs *pflag.FlagSet, withCapability bool) {
	n.volumeCtx, n.publishCtx, n.secrets = kvFlag{}, kvFlag{}, kvFlag{}
	fs.StringVar(&n.volume, "volume", "", "volume ID (required)")
	if withCapability {
		fs.Var(n.volumeCtx, "context", "volume_context (repeatable; what CreateVolume returned)")
		fs.Var(n.publishCtx, "publish-context", "publish_context (repeatable; what ControllerPublish returned)")
		fs.Var(n.secrets, "secret", "secret (repeatable)")
		n.vc.add(fs)
	}
}

func (c *client) stageCommand() *cobra.Command {
	var n nodeFlags
	var staging string
	var cmd *cobra.Command
	cmd = &cobra.Command{
		Use:     "stage --volume ID --staging PATH",
		Short:   "NodeStageVolume",
		Long:    nodeLong,
		Example: "  proxy-topology csi stage --volume v:local/vol-1 --staging /tmp/demo/staging",
		Args:    noArgs,
		RunE: c.run(func(ctx context.Context, _ []string) error {
			if n.volume == "" || staging == "" {
				return usagef("--volume and --staging are required")
			}
			vcap, err := n.vc.capability()
			if err != nil {
				return err
			}
			var header metadata.MD
			err = unary(ctx, c, "NodeStageVolume", func(ctx context.Context) (*csi.NodeStageVolumeResponse, error) {
				return c.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
					VolumeId: n.volume, StagingTargetPath: staging, VolumeCapability: vcap,
					VolumeContext: n.volumeCtx, PublishContext: n.publishCtx, Secrets: n.secrets}, grpc.Header(&header))
			}, func(out io.Writer, _ *csi.NodeStageVolumeResponse) {
				if conn := header.Get(pcsi.HeaderNotStaged); len(conn) > 0 {
					fmt.Fprintf(out, "volume %s was not staged: the node service answered OK without staging, because connection %q's upstream does not stage (no STAGE_UNSTAGE_VOLUME; SPEC §6); nothing was mounted at %s: publish it without --staging\n", n.volume, conn[0], staging)
					return
				}
				fmt.Fprintf(out, "staged volume %s at %s\n", n.volume, staging)
			})
			if conn := header.Get(pcsi.HeaderNotStaged); err == nil && c.output == "json" && len(conn) > 0 {
				// stdout holds the response alone; the note goes beside it.
				fmt.Fprintf(cmd.ErrOrStderr(), "note: volume %s was not staged: connection %q's upstream does not stage; nothing was mounted at %s\n", n.volume, conn[0], staging)
			}
			return err
		}),
	}
	n.add(cmd.Flags(), true)
	cmd.Flags().StringVar(&staging, "staging", "", "staging_target_path (required)")
	return cmd
}

func (c *client) unstageCommand() *cobra.Command {
	var n nodeFlags
	var staging string
	cmd := &cobra.Command{
		Use:     "unstage --volume ID --staging PATH",
		Short:   "NodeUnstageVolume",
		Long:    nodeLong,
		Example: "  proxy-topology csi unstage --volume v:local/vol-1 --staging /tmp/demo/staging",
		Args:    noArgs,
		RunE: c.run(func(ctx context.Context, _ []string) error {
			if n.volume == "" || staging == "" {
				return usagef("--volume and --staging are required")
			}
			return unary(ctx, c, "NodeUnstageVolume", func(ctx context.Context) (*csi.NodeUnstageVolumeResponse, error) {
				return c.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: n.volume, StagingTargetPath: staging})
			}, func(out io.Writer, _ *csi.NodeUnstageVolumeResponse) {
				fmt.Fprintf(out, "unstaged volume %s from %s\n", n.volume, staging)
			})
		}),
	}
	n.add(cmd.Flags(), false)
	cmd.Flags().StringVar(&staging, "staging", "", "staging_target_path (required)")
	return cmd
}

func (c *client) publishCommand() *cobra.Command {
	var n nodeFlags
	var target, staging string
	var readonly bool
	cmd := &cobra.Command{
		Use:     "publish --volume ID --target PATH [--staging PATH] [--readonly]",
		Short:   "NodePublishVolume",
		Long:    nodeLong,
		Example: "  proxy-topology csi publish --volume v:local/vol-1 --staging /tmp/demo/staging --target /tmp/demo/mnt",
		Args:    noArgs,
		RunE: c.run(func(ctx context.Context, _ []string) error {
			if n.volume == "" || target == "" {
				return usagef("--volume and --target are required")
			}
			vcap, err := n.vc.capability()
			if err != nil {
				return err
			}
			return unary(ctx, c, "NodePublishVolume", func(ctx context.Context) (*csi.NodePublishVolumeResponse, error) {
				return c.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
					VolumeId: n.volume, TargetPath: target, StagingTargetPath: staging, Readonly: readonly,
					VolumeCapability: vcap, VolumeContext: n.volumeCtx, PublishContext: n.publishCtx, Secrets: n.secrets})
			}, func(out io.Writer, _ *csi.NodePublishVolumeResponse) {
				fmt.Fprintf(out, "published volume %s at %s\n", n.volume, target)
			})
		}),
	}
	n.add(cmd.Flags(), true)
	fs := cmd.Flags()
	fs.StringVar(&target, "target", "", "target_path (required)")
	fs.StringVar(&staging, "staging", "", "staging_target_path, if the volume was staged")
	fs.BoolVar(&readonly, "readonly", false, "publish read-only")
	return cmd
}

func (c *client) unpublishCommand() *cobra.Command {
	var n nodeFlags
	var target string
	cmd := &cobra.Command{
		Use:     "unpublish --volume ID --target PATH",
		Short:   "NodeUnpublishVolume",
		Long:    nodeLong,
		Example: "  proxy-topology csi unpublish --volume v:local/vol-1 --target /tmp/demo/mnt",
		Args:    noArgs,
		RunE: c.run(func(ctx context.Context, _ []string) error {
			if n.volume == "" || target == "" {
				return usagef("--volume and --target are required")
			}
			return unary(ctx, c, "NodeUnpublishVolume", func(ctx context.Context) (*csi.NodeUnpublishVolumeResponse, error) {
				return c.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: n.volume, TargetPath: target})
			}, func(out io.Writer, _ *csi.NodeUnpublishVolumeResponse) {
				fmt.Fprintf(out, "unpublished volume %s from %s\n", n.volume, target)
			})
		}),
	}
	n.add(cmd.Flags(), false)
	cmd.Flags().StringVar(&target, "target", "", "target_path (required)")
	return cmd
}
