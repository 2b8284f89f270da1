// Command proxy-topology is a CSI driver that routes many StorageClasses to
// connections (external CSI drivers or the built-in local-hostpath) and adds
// topology. Subcommands: serve (the default), topology, check, csi, version;
// `proxy-topology --help` lists them.
//
// This package is main only: the command line (cobra), loading and
// validating the config, wiring the packages together and serving. The CSI
// client of `proxy-topology csi` lives in internal/csiclient.
//
// The files, by subcommand:
//
//   - main.go: the root command, exit codes, version.
//   - serve.go: serve: Options and their flags, Serve (config, store,
//     driver, socket, shutdown); kube.go: the Kubernetes client, klog
//     routed to the process logger, the node's inputs with its labels,
//     the connections Secret; ops.go: the metrics server and its hooks;
//     pprof.go: --pprof-address; nodelocal.go: node-local connections
//     (SPEC §12) in serve (the node key, the warning of a central
//     controller), in check and in the dry run.
//   - topology.go: topology, the dry run of node rules and CreateVolume;
//     group.go: groups in check and in the dry run (SPEC §11). The dry run
//     reads connections with connection.Inspect and decides with
//     pkg/csi's Placement, the server's own code.
//   - check.go: check, the validation of the main config and connection
//     files; checkcaps.go: what each upstream answers (the capabilities
//     auto would advertise, connections that route back to the proxy);
//     checkids.go: the room a connection's name leaves for IDs.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/democratic-csi/proxy-topology/internal/csiclient"
)

// version is stamped by the build (-ldflags "-X main.version=…"); without
// it the VCS revision Go records is used.
var version = ""

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return "dev-" + s.Value[:12]
			}
		}
	}
	return "dev"
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes of every command.
const (
	exitFailed = 1 // the command ran and failed; it says why
	exitUsage  = 2 // the command line or a flag's value is wrong
)

// exitCoder is an error that decides the exit code. The commands return
// only such errors; any other comes from parsing the command line and
// exits 2.
type exitCoder interface {
	error
	ExitCode() int
}

// exitError is the error of this package's commands. An exitError without
// err prints nothing: the command has already said what failed (serve has
// logged it, topology printed its verdict).
type exitError struct {
	code int
	err  error
	// usage prints the command's usage after err: the command line is
	// wrong, rather than, say, the config file it names.
	usage bool
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }
func (e *exitError) ExitCode() int { return e.code }

func usageError(err error) error { return &exitError{code: exitUsage, err: err, usage: true} }

func usagef(format string, a ...any) error { return usageError(fmt.Errorf(format, a...)) }

// configErrorf is exit code 2 without the usage: the flags are fine, what
// they point at is not.
func configErrorf(format string, a ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, a...)}
}

// run executes the command line args and returns the exit code: 0
// success, 1 the command failed, 2 the command line is wrong. Help and
// --version go to stdout; errors, and the usage after a wrong command
// line, to stderr.
func run(args []string, stdout, stderr io.Writer) int {
	root := newRootCommand()
	root.SetArgs(append([]string{}, args...)) // never nil: cobra reads os.Args for nil
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	code := exitUsage
	var coded exitCoder
	if errors.As(err, &coded) {
		code = coded.ExitCode()
	}
	var own *exitError
	isOwn := errors.As(err, &own)
	if isOwn && own.err == nil {
		return code
	}
	if code == exitUsage {
		// A mistake is named by the exact command, whose usage follows.
		fmt.Fprintf(stderr, "%s: %v\n", cmd.CommandPath(), err)
		if !isOwn || own.usage {
			fmt.Fprintf(stderr, "\n%s", cmd.UsageString())
		}
		return code
	}
	// A failure is named by the top-level command: "proxy-topology csi:
	// CreateVolume failed: …".
	top := cmd
	for top.HasParent() && top.Parent().HasParent() {
		top = top.Parent()
	}
	fmt.Fprintf(stderr, "%s: %v\n", top.CommandPath(), err)
	return code
}

// newRootCommand builds the command tree. The root itself serves, with
// serve's flags, so that `proxy-topology --csi-endpoint …` (how the
// manifests in deploy/ and older scripts start it) is `proxy-topology
// serve --csi-endpoint …`.
func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "proxy-topology",
		Short: "A CSI driver that routes many StorageClasses to storage connections and adds topology",
		Long: `proxy-topology is one CSI driver for many storage systems: a StorageClass
names a connection (parameters.connection), one YAML file per connection in
a folder or a Secret; every CSI call is routed to that connection's driver,
and CreateVolume answers with the zones the connection can reach.

Without a command it serves: the flags below are serve's, and
"proxy-topology --csi-endpoint …" is "proxy-topology serve --csi-endpoint …".`,
		Example: `  proxy-topology serve --config /etc/proxy-topology/proxy.yaml --mode node
  proxy-topology topology --config proxy.yaml --node-name worker-zone2-07 --connection nfs-zone1 --requisite zone=zone2
  proxy-topology check --config proxy.yaml --connections-folder connections/
  proxy-topology csi info`,
		Version:           buildVersion(),
		SilenceErrors:     true, // run prints errors and usage
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	// The root has no Args: cobra then refuses a word that is not a
	// command as `unknown command "x"`, with suggestions.
	addServe(root)
	root.AddCommand(newServeCommand(), newTopologyCommand(), newCheckCommand(), newMigrateCommand(), csiclient.NewCommand(), newVersionCommand())
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version (as GetPluginInfo reports it)",
		Long:    "Prints the version GetPluginInfo reports, as --version on the root does.",
		Example: "  proxy-topology version\n  proxy-topology --version",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), buildVersion())
			return nil
		},
	}
}

// noArgs refuses positional arguments.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q", args[0])
	}
	return nil
}
