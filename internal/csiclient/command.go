package csiclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
	"github.com/democratic-csi/proxy-topology/pkg/endpoint"
	"github.com/democratic-csi/proxy-topology/pkg/nodetopology"
)

// client is one invocation of `proxy-topology csi`: the shared flags, the
// connection and where output goes.
type client struct {
	endpoint, output, prefix string
	timeout                  time.Duration

	stdout     io.Writer
	stderr     io.Writer
	conn       *grpc.ClientConn
	identity   csi.IdentityClient
	controller csi.ControllerClient
	node       csi.NodeClient
}

// NewCommand returns `csi` with its subcommands. The shared flags are
// persistent, so they may come before or after the subcommand's name.
// --endpoint defaults to $CSI_ENDPOINT, else serve's default socket.
func NewCommand() *cobra.Command {
	c := &client{}
	cmd := &cobra.Command{
		Use:   "csi",
		Short: "Call the CSI socket: info, create-volume, list-volumes, stage, publish, …",
		Long: `A CSI client for the proxy's socket, for an admin who execs into the pod
(the image has no other CSI client) or a script (-o json).

The endpoint defaults to $CSI_ENDPOINT, else serve's default
` + pcsi.DefaultEndpoint + `; /path/csi.sock and tcp://host:port work too.
The shared flags (--endpoint, -o, --timeout, --prefix) may come before or
after the command.

Short topology keys in --requisite, --preferred and --topology get the
prefix (--prefix) unless they contain '/', exactly like node rules. Sizes
are 1Gi, 500Mi, 10G or a byte count.

Output is text; -o json prints the response as protojson (for list-*, one
response holding every page's entries). Exit codes: 0 the call succeeded,
1 it failed (its gRPC code as the CSI spec spells it, and the message, on
stderr), 2 the command line is wrong.`,
		Example: `  proxy-topology csi info
  proxy-topology csi --endpoint unix:///run/csi/csi.sock node-info
  proxy-topology csi create-volume --name pvc-1 --connection nfs-zone1 --requisite zone=zone1 --size 1Gi
  proxy-topology csi -o json list-volumes | jq -r '.entries[].volume.volumeId'
  proxy-topology csi delete-volume --volume v:nfs-zone1/vol-1`,
		// A missing or misspelt command is reported here, the same way
		// wherever the command is mounted: without RunE cobra would print
		// the help and succeed, and without Args it would report it its
		// own way when csi is the root.
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("a command is required")
			}
			msg := fmt.Sprintf("unknown command %q", args[0])
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += "; did you mean " + strings.Join(s, " or ") + "?"
			}
			return usagef("%s", msg)
		},
	}
	fs := cmd.PersistentFlags()
	fs.StringVar(&c.endpoint, "endpoint", or(os.Getenv("CSI_ENDPOINT"), pcsi.DefaultEndpoint), "CSI socket: unix:///path, /path or tcp://host:port (env CSI_ENDPOINT)")
	fs.StringVarP(&c.output, "output", "o", "text", "output: text, or json (protojson of the response)")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Minute, "deadline for the whole command")
	fs.StringVar(&c.prefix, "prefix", nodetopology.DefaultPrefix, "prefix given to short topology keys in --requisite, --preferred and --topology")

	cmd.AddCommand(
		c.infoCommand(), c.nodeInfoCommand(),
		c.createVolumeCommand(), c.deleteVolumeCommand(), c.getVolumeCommand(), c.expandVolumeCommand(),
		c.listVolumesCommand(), c.getCapacityCommand(),
		c.createSnapshotCommand(), c.deleteSnapshotCommand(), c.listSnapshotsCommand(),
		c.stageCommand(), c.unstageCommand(), c.publishCommand(), c.unpublishCommand(),
	)
	// --o json, as the flag was once spelt, still means --output json.
	cmd.SetGlobalNormalizationFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "o" {
			name = "output"
		}
		return pflag.NormalizedName(name)
	})
	return cmd
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// run adapts a subcommand's body to cobra. Before the body it checks the
// shared flags and connects (lazily: grpc.NewClient does not dial); the
// body runs under --timeout; after it the connection is closed. Every
// error it returns says how the command failed (ExitCode).
func (c *client) run(body func(ctx context.Context, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c.stdout, c.stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
		err := c.dial()
		if err == nil {
			ctx, cancel := context.WithTimeout(cmd.Context(), c.timeout)
			err = body(ctx, args)
			cancel()
			c.conn.Close()
		}
		var coded interface{ ExitCode() int }
		if err != nil && !errors.As(err, &coded) {
			err = &failure{err}
		}
		return err
	}
}

func (c *client) dial() error {
	switch c.output {
	case "text", "json":
	default:
		return usagef("-o %q: want text or json", c.output)
	}
	if c.timeout <= 0 {
		// context.WithTimeout would expire at once and every call would
		// answer DEADLINE_EXCEEDED, as if the driver were slow.
		return usagef("--timeout %s: want a positive duration, e.g. 30s or 2m", c.timeout)
	}
	target, err := grpcTarget(c.endpoint)
	if err != nil {
		return usagef("%v", err)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return usagef("--endpoint %q: %v", c.endpoint, err)
	}
	c.conn = conn
	c.identity, c.controller, c.node = csi.NewIdentityClient(conn), csi.NewControllerClient(conn), csi.NewNodeClient(conn)
	return nil
}

// grpcTarget turns a CSI endpoint into a gRPC target.
func grpcTarget(ep string) (string, error) {
	parsed, err := endpoint.Parse(ep, endpoint.Dial)
	if err != nil {
		return "", fmt.Errorf("--endpoint %w", err)
	}
	return parsed.Target(), nil
}

// noArgs and maxArgs check positional arguments; flags may come before
// or after them.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q", args[0])
	}
	return nil
}

// maxArgs allows the deprecated positional ID (idArg) and nothing more.
func maxArgs(n int) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) > n {
			return usagef("unexpected argument %q", args[n])
		}
		return nil
	}
}

// idArg is the volume or snapshot ID a command acts on: --volume ID (or
// --snapshot ID) on every command. Until the next release the ID may also
// be the one positional argument, as delete-volume, get-volume,
// expand-volume and delete-snapshot once took it; that form warns on
// stderr. flag is the flag's name, value what it was given.
func (c *client) idArg(cmd string, args []string, flag, value string) (string, error) {
	switch {
	case len(args) == 0 && value == "":
		return "", usagef("--%s is required", flag)
	case len(args) == 0:
		return value, nil
	case value != "":
		return "", usagef("the ID is given twice (--%s %q and %q): give --%s alone", flag, value, args[0], flag)
	}
	fmt.Fprintf(c.stderr, "warning: %s ID is deprecated and goes in the next release; use %s --%s ID\n", cmd, cmd, flag)
	return args[0], nil
}

// unary is what every single-call command shares: call, report a failed
// RPC, print the response as text or JSON.
func unary[Resp proto.Message](ctx context.Context, c *client, method string, call func(context.Context) (Resp, error), text func(out io.Writer, resp Resp)) error {
	resp, err := call(ctx)
	if err != nil {
		return rpcFailed(method, err)
	}
	return c.emit(resp, func(out io.Writer) { text(out, resp) })
}
