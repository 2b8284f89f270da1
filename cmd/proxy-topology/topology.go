package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/internal/csiclient"
	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/config"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
	"github.com/democratic-csi/proxy-topology/pkg/nodetopology"
)

// dryRun is the admin's dry run behind `proxy-topology topology`: which
// segments would a node report, and would CreateVolume succeed for a
// connection and a claim's topology requirement. Its fields are the flags.
type dryRun struct {
	// Config is the main config; empty uses the built-in example config.
	Config string
	// NodeName, Hostname, Env (K=V), Files (PATH=CONTENT) and Labels
	// (K=V) are the node's inputs to the rules.
	NodeName, Hostname string
	Env, Files, Labels []string
	// Live reads the hostname, env vars and files from this machine; the
	// flags above still win.
	Live bool
	// Connection, if set, is checked for a CreateVolume with Requisite
	// and Preferred (terms k=v,k=v) as the claim's requirement; its file
	// is read from Folder, default proxy.configFolder.
	Connection, Folder   string
	Requisite, Preferred []string
	// NodeTerm uses the node's segments as the claim's requisite and
	// preferred term, as the external-provisioner does in strict
	// WaitForFirstConsumer mode once the scheduler picked the node.
	NodeTerm bool
	// UpstreamAnswer (terms k=v,k=v in the upstream's own keys) is the
	// accessible_topology the connection's upstream answers; the dry run
	// shows its translation (proxy.perDriver.upstreamTopology, SPEC §13).
	UpstreamAnswer []string
}

func (d *dryRun) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&d.Config, "config", env("PROXY_TOPOLOGY_CONFIG"), "main config file (env PROXY_TOPOLOGY_CONFIG); empty uses the built-in example config")
	fs.StringVar(&d.NodeName, "node-name", defaultNodeID(), "node name the rules see (env CSI_NODE_ID, then NODE_NAME, then the hostname, as serve's --node-id)")
	fs.StringVar(&d.Hostname, "hostname", "", "hostname the rules see")
	fs.StringArrayVar(&d.Env, "env", nil, "`K=V` env var the rules see (repeatable)")
	fs.StringArrayVar(&d.Files, "file", nil, "`PATH=CONTENT` file the rules see (repeatable)")
	fs.StringArrayVar(&d.Labels, "label", nil, "`K=V` node label the rules see (repeatable)")
	fs.BoolVar(&d.Live, "live", false, "read hostname, env vars and files from this machine (flags still win)")
	fs.StringVar(&d.Connection, "connection", "", "connection to check a CreateVolume against")
	fs.StringVar(&d.Folder, "connections-folder", "", "folder with <connection>.yaml; default proxy.configFolder")
	fs.StringArrayVar(&d.Requisite, "requisite", nil, "requisite term `k=v,k=v` (repeatable; terms are ORed; short keys get the prefix)")
	fs.StringArrayVar(&d.Preferred, "preferred", nil, "preferred term `k=v,k=v` (repeatable, in order)")
	fs.BoolVar(&d.NodeTerm, "node-term", false, "use the node's segments as the requisite and preferred term (a strict WaitForFirstConsumer claim scheduled onto this node)")
	fs.StringArrayVar(&d.UpstreamAnswer, "upstream-answer", nil, "term `k=v,k=v` of the upstream's accessible_topology, in its own keys (repeatable): show how the connection's upstreamTopology translates it")
}

func newTopologyCommand() *cobra.Command {
	var d dryRun
	cmd := &cobra.Command{
		Use:   "topology",
		Short: "Dry-run node topology rules and CreateVolume accessibility",
		Long: `Prints the segments a node would report and why each rule matched or not;
with --connection, whether CreateVolume would succeed for that connection and
the claim's --requisite/--preferred terms (or, with --node-term, the node's
own segments, as a strict WaitForFirstConsumer claim scheduled onto it
sends), and the accessible_topology it would return. For a group
(driver: group) it says which member the claim would reach and why. With
--upstream-answer, the upstream's own accessible_topology is translated
by the connection's proxy.perDriver.upstreamTopology and checked as
CreateVolume checks it.
Nothing is served and no cluster is needed.

The node's inputs are flags; the node name defaults to what serve would use
as its node id.

Exit codes: 0 the node has segments (and CreateVolume would succeed),
1 it has none or CreateVolume would fail, 2 bad flags or config.`,
		Example: `  proxy-topology topology --config proxy.yaml --node-name worker-zone2-07 --file /etc/proxy-topology/region=region1
  proxy-topology topology --config proxy.yaml --node-name worker-zone2-07 --connection nfs-zone1 --requisite zone=zone2
  proxy-topology topology --config proxy.yaml --node-name worker-zone2-07 --connection nfs-zones --node-term
  proxy-topology topology --config proxy.yaml --node-name worker-1 --connection democratic-csi-local --upstream-answer org.democratic-csi.topology/node=worker-1
  proxy-topology topology --config proxy.yaml --live --label topology.kubernetes.io/zone=zone1`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return d.run(cmd.Context(), cmd.OutOrStdout()) },
	}
	d.addFlags(cmd.Flags())
	return cmd
}

// run prints the dry run to stdout. A verdict of "would fail" is an
// exitError without a message: the output already says why.
func (d *dryRun) run(ctx context.Context, stdout io.Writer) error {
	var cfg *config.Loaded
	var err error
	if d.Config != "" {
		cfg, err = config.LoadMainFile(d.Config)
	} else {
		data, _ := examplesProxyYAML()
		cfg, err = config.LoadMain("(built-in examples/proxy.yaml)", data, os.Environ())
	}
	if err != nil {
		return configErrorf("%v", err)
	}
	if cfg.Driver != config.DriverProxy {
		return configErrorf("config %s serves driver %s, which has no topology", cfg.File, cfg.Driver)
	}
	ev := cfg.Topology

	in := nodetopology.Inputs{NodeName: d.NodeName, Hostname: d.Hostname, Env: map[string]string{}, Files: map[string]nodetopology.FileInput{}}
	if d.Live {
		in = nodetopology.Gather(ctx, ev, d.NodeName, nil)
		if d.Hostname != "" {
			in.Hostname = d.Hostname
		}
	}
	for _, kv := range d.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return usagef("--env %q: want K=V", kv)
		}
		in.Env[k] = v
	}
	for _, kv := range d.Files {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return usagef("--file %q: want PATH=CONTENT", kv)
		}
		in.Files[k] = nodetopology.FileInput{Content: v}
	}
	if len(d.Labels) > 0 {
		in.Labels = map[string]string{}
		for _, kv := range d.Labels {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return usagef("--label %q: want K=V", kv)
			}
			in.Labels[k] = v
		}
	}
	req := &csi.TopologyRequirement{}
	for _, t := range d.Requisite {
		seg, err := csiclient.ParseTerm(t, ev.Prefix())
		if err != nil {
			return usagef("--requisite: %v", err)
		}
		req.Requisite = append(req.Requisite, seg)
	}
	for _, t := range d.Preferred {
		seg, err := csiclient.ParseTerm(t, ev.Prefix())
		if err != nil {
			return usagef("--preferred: %v", err)
		}
		req.Preferred = append(req.Preferred, seg)
	}

	var answer []*csi.Topology
	for _, t := range d.UpstreamAnswer {
		// The upstream's keys are used as written: no prefix.
		seg, err := csiclient.ParseTerm(t, "")
		if err != nil {
			return usagef("--upstream-answer: %v", err)
		}
		answer = append(answer, seg)
	}

	res := ev.Evaluate(in)
	if d.NodeTerm {
		if len(req.Requisite)+len(req.Preferred) > 0 {
			return usagef("--node-term and --requisite/--preferred: give one or the other")
		}
		req = nodeTerm(res.Segments)
	}
	fmt.Fprintf(stdout, "node %q (type %s, prefix %s)\n", in.NodeName, ev.Type(), ev.Prefix())
	for _, r := range res.Rules {
		line := fmt.Sprintf("  rule %d  %-8s %s <- %s", r.Index, r.Status, r.Key, r.Source)
		if r.Status == nodetopology.StatusMatched {
			line += fmt.Sprintf(" = %q", r.Value)
		}
		if r.Reason != "" {
			line += ": " + r.Reason
		}
		fmt.Fprintln(stdout, line)
	}
	fmt.Fprintln(stdout, "segments:")
	for _, k := range slices.Sorted(maps.Keys(res.Segments)) {
		fmt.Fprintf(stdout, "  %s=%s\n", k, res.Segments[k])
	}
	var verdict error
	if err := res.Err(); err != nil {
		fmt.Fprintf(stdout, "NodeGetInfo would fail: %s\n", status.Convert(err).Message())
		verdict = &exitError{code: exitFailed}
	}
	if d.Connection == "" {
		return verdict
	}

	folder := d.Folder
	if folder == "" {
		folder = cfg.Proxy.ConfigFolder
	}
	conn := d.Connection
	terms := fmt.Sprintf("  requisite: %s\n  preferred: %s\n", csiclient.FormatTerms(req.Requisite), csiclient.FormatTerms(req.Preferred))
	// The connection is read as the server reads it, without an upstream,
	// and decided as the controller on the dry run's node would decide.
	src := connection.NewFolderSource(folder)
	place := pcsi.Placement{Topology: ev.Accessibility(), Host: accessible.Host{Name: in.NodeName, Segments: res.Segments}}
	c, err := connection.Inspect(src, conn, place.Topology)
	switch {
	case errors.Is(err, connection.ErrInvalidName):
		// The server refuses a name that can never be a connection
		// before it looks for a file, whatever the folder holds.
		fmt.Fprintf(stdout, "connection %q:\n%s", conn, terms)
		return dryRunFailed(stdout, status.Error(codes.InvalidArgument, err.Error()))
	case err != nil:
		return configErrorf("%v", err)
	}
	if c.IsGroup() {
		return dryRunGroup(stdout, src, c, req, answer, place, terms, verdict)
	}
	fmt.Fprintf(stdout, "connection %q (%s):\n%s", conn, shown(c.File), terms)
	top, err := dryRunDecide(stdout, c, req, answer, place)
	if err != nil {
		return dryRunFailed(stdout, err)
	}
	fmt.Fprintln(stdout, "  CreateVolume: OK")
	printAccessible(stdout, top)
	return verdict
}
