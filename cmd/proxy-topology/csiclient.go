package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	rpccode "google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
	"github.com/democratic-csi/proxy-topology/pkg/nodetopology"
)

// errUsage marks a command-line mistake (exit 2), as opposed to a failed
// RPC (exit 1).
var errUsage = errors.New("usage")

// csiClient is one invocation of `proxy-topology csi`: the flags every
// command shares, the connection and where output goes.
type csiClient struct {
	endpoint, output, prefix string
	timeout                  time.Duration

	stdout, stderr io.Writer
	conn           *grpc.ClientConn
	identity       csi.IdentityClient
	controller     csi.ControllerClient
	node           csi.NodeClient
}

// addFlags registers the shared flags on fs with their current values as
// defaults, so they may be given before or after the command name.
func (c *csiClient) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.endpoint, "endpoint", c.endpoint, "CSI socket: unix:///path, /path or tcp://host:port (env CSI_ENDPOINT)")
	fs.StringVar(&c.output, "o", c.output, "output: text or json (protojson of the response)")
	fs.DurationVar(&c.timeout, "timeout", c.timeout, "deadline for the whole command")
	fs.StringVar(&c.prefix, "prefix", c.prefix, "prefix given to short topology keys in --requisite, --preferred and --topology")
}

type csiCommand struct {
	name, args, help string
	run              func(c *csiClient, fs *flag.FlagSet, args []string) error
}

var csiCommands = []csiCommand{
	{"info", "", "plugin name, version, capabilities and Probe", (*csiClient).info},
	{"node-info", "", "NodeGetInfo: node id and topology", (*csiClient).nodeInfo},
	{"create-volume", "--name N [--connection C] [--param k=v]… [--requisite k=v,…]… [--preferred k=v,…]… [--size 1Gi]", "CreateVolume", (*csiClient).createVolume},
	{"delete-volume", "ID", "DeleteVolume", (*csiClient).deleteVolume},
	{"get-volume", "ID", "ControllerGetVolume", (*csiClient).getVolume},
	{"expand-volume", "ID --size S", "ControllerExpandVolume", (*csiClient).expandVolume},
	{"list-volumes", "[--max N]", "ListVolumes, following next_token to the end", (*csiClient).listVolumes},
	{"get-capacity", "[--connection C] [--param k=v]… [--topology k=v,…]", "GetCapacity", (*csiClient).getCapacity},
	{"create-snapshot", "--name N --source-volume ID", "CreateSnapshot", (*csiClient).createSnapshot},
	{"delete-snapshot", "ID", "DeleteSnapshot", (*csiClient).deleteSnapshot},
	{"list-snapshots", "[--max N] [--source-volume ID] [--snapshot-id ID]", "ListSnapshots, following next_token", (*csiClient).listSnapshots},
	{"stage", "--volume ID --staging PATH", "NodeStageVolume", (*csiClient).stage},
	{"unstage", "--volume ID --staging PATH", "NodeUnstageVolume", (*csiClient).unstage},
	{"publish", "--volume ID --target PATH [--staging PATH] [--readonly]", "NodePublishVolume", (*csiClient).publish},
	{"unpublish", "--volume ID --target PATH", "NodeUnpublishVolume", (*csiClient).unpublish},
}

// csiCmd is a small CSI client for the proxy's socket, for an admin who
// execs into the pod. Exit codes: 0 ok, 1 the RPC failed, 2 usage.
func csiCmd(args []string, stdout, stderr io.Writer) int {
	c := &csiClient{
		endpoint: or(env("CSI_ENDPOINT"), pcsi.DefaultEndpoint), output: "text",
		prefix: nodetopology.DefaultPrefix, timeout: 2 * time.Minute,
		stdout: stdout, stderr: stderr,
	}
	fs := flag.NewFlagSet("csi", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.addFlags(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: proxy-topology csi [--endpoint unix:///run/csi/csi.sock] [-o json] <command> [flags]\n\ncommands:\n")
		w := tabwriter.NewWriter(stderr, 0, 0, 2, ' ', 0)
		for _, cmd := range csiCommands {
			fmt.Fprintf(w, "  %s\t%s\n", cmd.name, cmd.help)
		}
		w.Flush()
		fmt.Fprint(stderr, "\n`proxy-topology csi <command> -h` lists a command's flags. Short topology keys get the\nprefix; keys containing '/' are used as they are.\n\nshared flags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	name := fs.Arg(0)
	i := slices.IndexFunc(csiCommands, func(cmd csiCommand) bool { return cmd.name == name })
	if i < 0 {
		fmt.Fprintf(stderr, "proxy-topology csi: unknown command %q\n", name)
		fs.Usage()
		return 2
	}
	cmd := csiCommands[i]
	sub := flag.NewFlagSet("csi "+name, flag.ContinueOnError)
	sub.SetOutput(stderr)
	sub.Usage = func() {
		fmt.Fprintf(stderr, "usage: proxy-topology csi %s %s\n\n%s\n\n", name, cmd.args, cmd.help)
		sub.PrintDefaults()
	}
	c.addFlags(sub)
	err := cmd.run(c, sub, fs.Args()[1:])
	if c.conn != nil {
		c.conn.Close()
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage), errors.Is(err, flag.ErrHelp):
		return 2
	}
	var rpc *rpcError
	if errors.As(err, &rpc) {
		st := status.Convert(rpc.err)
		fmt.Fprintf(stderr, "proxy-topology csi: %s failed: %s: %s\n", rpc.method, codeName(st.Code()), st.Message())
		return 1
	}
	fmt.Fprintln(stderr, "proxy-topology csi:", err)
	return 1
}

// rpcError is a failed call, printed with its gRPC code.
type rpcError struct {
	method string
	err    error
}

func (e *rpcError) Error() string { return e.method + ": " + e.err.Error() }

func rpcFailed(method string, err error) error { return &rpcError{method, err} }

// codeName is the code as the CSI spec writes it: RESOURCE_EXHAUSTED.
func codeName(c codes.Code) string { return rpccode.Code(c).String() }

// usageError prints a message and the command's usage.
func usageError(fs *flag.FlagSet, format string, a ...any) error {
	fmt.Fprintf(fs.Output(), "proxy-topology %s: %s\n", fs.Name(), fmt.Sprintf(format, a...))
	fs.Usage()
	return errUsage
}

// parse parses fs, allowing flags after positional arguments
// (`delete-volume ID --secret k=v`), and checks the positional count.
func parse(fs *flag.FlagSet, args []string, positional int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, flag.ErrHelp
			}
			return nil, errUsage
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) != positional {
		if positional == 0 {
			return nil, usageError(fs, "unexpected argument %q", pos[0])
		}
		return nil, usageError(fs, "want %d argument(s), got %d", positional, len(pos))
	}
	return pos, nil
}

// dial connects lazily (grpc.NewClient does not dial) after the flags are
// known; the first RPC reports an unreachable socket as UNAVAILABLE.
func (c *csiClient) dial(fs *flag.FlagSet) (context.Context, context.CancelFunc, error) {
	switch c.output {
	case "text", "json":
	default:
		return nil, nil, usageError(fs, "-o %q: want text or json", c.output)
	}
	target, err := grpcTarget(c.endpoint)
	if err != nil {
		return nil, nil, usageError(fs, "%v", err)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, usageError(fs, "--endpoint %q: %v", c.endpoint, err)
	}
	c.conn = conn
	c.identity, c.controller, c.node = csi.NewIdentityClient(conn), csi.NewControllerClient(conn), csi.NewNodeClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	return ctx, cancel, nil
}

// grpcTarget turns a CSI endpoint into a gRPC target.
func grpcTarget(ep string) (string, error) {
	switch {
	case strings.HasPrefix(ep, "unix://"), strings.HasPrefix(ep, "unix:"):
		return ep, nil
	case strings.HasPrefix(ep, "/"):
		return "unix://" + ep, nil
	case strings.HasPrefix(ep, "tcp://"):
		return "passthrough:///" + strings.TrimPrefix(ep, "tcp://"), nil
	}
	return "", fmt.Errorf("--endpoint %q: want unix:///path/to/csi.sock, /path/to/csi.sock or tcp://host:port", ep)
}

// --- flag types -------------------------------------------------------------

// kvFlag collects repeatable k=v flags into a map.
type kvFlag map[string]string

func (m kvFlag) String() string { return formatMap(m) }
func (m kvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want key=value", s)
	}
	m[k] = v
	return nil
}

// sizeFlag is a byte count written as 1Gi, 500Mi, 10G or 1073741824.
type sizeFlag int64

func (s *sizeFlag) String() string { return formatSize(int64(*s)) }
func (s *sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	*s = sizeFlag(n)
	return err
}

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10},
	{"T", 1e12}, {"G", 1e9}, {"M", 1e6}, {"K", 1e3}, {"k", 1e3},
}

func parseSize(s string) (int64, error) {
	num, mult := s, int64(1)
	for _, u := range sizeUnits {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q: want a size like 1Gi, 500Mi, 10G or a byte count", s)
	}
	return n * mult, nil
}

// formatSize prints b in the largest binary unit it reaches: exact when
// the unit divides it (1Gi), else to one decimal (78.1Gi).
func formatSize(b int64) string {
	for _, u := range sizeUnits[:4] {
		switch {
		case b < u.mult:
			continue
		case b%u.mult == 0:
			return strconv.FormatInt(b/u.mult, 10) + u.suffix
		default:
			return strconv.FormatFloat(float64(b)/float64(u.mult), 'f', 1, 64) + u.suffix
		}
	}
	return strconv.FormatInt(b, 10)
}

func sizeText(b int64) string {
	if b == 0 {
		return "0 (not reported)"
	}
	return fmt.Sprintf("%s (%d bytes)", formatSize(b), b)
}

// termsFlag collects repeatable topology terms; they are parsed after all
// flags, so --prefix applies wherever it is given.
type termsFlag []string

func (t *termsFlag) String() string     { return strings.Join(*t, " ") }
func (t *termsFlag) Set(s string) error { *t = append(*t, s); return nil }

func (t termsFlag) terms(fs *flag.FlagSet, flagName, prefix string) ([]*csi.Topology, error) {
	var out []*csi.Topology
	for _, s := range t {
		seg, err := parseTerm(s, prefix)
		if err != nil {
			return nil, usageError(fs, "--%s: %v", flagName, err)
		}
		out = append(out, seg)
	}
	return out, nil
}

// accessModes maps single-node-writer to SINGLE_NODE_WRITER and so on.
func accessModes() map[string]csi.VolumeCapability_AccessMode_Mode {
	out := map[string]csi.VolumeCapability_AccessMode_Mode{}
	for v, name := range csi.VolumeCapability_AccessMode_Mode_name {
		if v != 0 {
			out[strings.ToLower(strings.ReplaceAll(name, "_", "-"))] = csi.VolumeCapability_AccessMode_Mode(v)
		}
	}
	return out
}

// capFlags builds one volume capability.
type capFlags struct {
	fsType, accessMode string
	block              bool
}

func (f *capFlags) add(fs *flag.FlagSet) {
	modes := slices.Sorted(func(yield func(string) bool) {
		for k := range accessModes() {
			if !yield(k) {
				return
			}
		}
	})
	fs.StringVar(&f.fsType, "fs-type", "", "file system type of a mount volume")
	fs.StringVar(&f.accessMode, "access-mode", "single-node-writer", "one of "+strings.Join(modes, ", "))
	fs.BoolVar(&f.block, "block", false, "a raw block volume instead of a mount")
}

func (f *capFlags) capability(fs *flag.FlagSet) (*csi.VolumeCapability, error) {
	mode, ok := accessModes()[f.accessMode]
	if !ok {
		return nil, usageError(fs, "--access-mode %q is not a CSI access mode", f.accessMode)
	}
	vc := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
	if f.block {
		if f.fsType != "" {
			return nil, usageError(fs, "--fs-type does not apply to --block")
		}
		vc.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	} else {
		vc.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: f.fsType}}
	}
	return vc, nil
}

// --- output -----------------------------------------------------------------

// marshalJSON is protojson re-indented by encoding/json: protojson varies
// its whitespace on purpose, and output people diff should not.
func marshalJSON(m proto.Message) ([]byte, error) {
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// emit prints resp as protojson with -o json, else runs text.
// unary is what every single-call command shares: dial, call, report a
// failed RPC, print the response as text or JSON.
func unary[Resp proto.Message](c *csiClient, fs *flag.FlagSet, method string, call func(context.Context) (Resp, error), text func(out io.Writer, resp Resp)) error {
	ctx, cancel, err := c.dial(fs)
	if err != nil {
		return err
	}
	defer cancel()
	resp, err := call(ctx)
	if err != nil {
		return rpcFailed(method, err)
	}
	return c.emit(resp, func(out io.Writer) { text(out, resp) })
}

func (c *csiClient) emit(resp proto.Message, text func(w io.Writer)) error {
	if c.output == "json" {
		b, err := marshalJSON(resp)
		if err != nil {
			return err
		}
		fmt.Fprintln(c.stdout, string(b))
		return nil
	}
	text(c.stdout)
	return nil
}

func formatMap(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	parts := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

func topologyText(ts []*csi.Topology) string {
	if len(ts) == 0 {
		return "none (reachable from every node)"
	}
	return formatTerms(ts)
}

func enumList[E fmt.Stringer](xs []E) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = x.String()
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// --- commands ---------------------------------------------------------------

func (c *csiClient) info(fs *flag.FlagSet, args []string) error {
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	ctx, cancel, err := c.dial(fs)
	if err != nil {
		return err
	}
	defer cancel()
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

func (c *csiClient) nodeInfo(fs *flag.FlagSet, args []string) error {
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	return unary(c, fs, "NodeGetInfo", func(ctx context.Context) (*csi.NodeGetInfoResponse, error) {
		return c.node.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	}, func(out io.Writer, resp *csi.NodeGetInfoResponse) {
		w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintf(w, "node_id:\t%s\n", resp.GetNodeId())
		maxVols := strconv.FormatInt(resp.GetMaxVolumesPerNode(), 10)
		if resp.GetMaxVolumesPerNode() == 0 {
			maxVols = "0 (no limit)"
		}
		fmt.Fprintf(w, "max_volumes_per_node:\t%s\n", maxVols)
		fmt.Fprintf(w, "accessible_topology:\t%s\n", formatMap(resp.GetAccessibleTopology().GetSegments()))
		w.Flush()
	})
}

func (c *csiClient) createVolume(fs *flag.FlagSet, args []string) error {
	var (
		name, connection, srcSnap, srcVol string
		size, limit                       sizeFlag
		params, secrets                   = kvFlag{}, kvFlag{}
		requisite, preferred              termsFlag
		vc                                capFlags
	)
	fs.StringVar(&name, "name", "", "volume name (required; the CO uses the PVC's pvc-<uid>)")
	fs.StringVar(&connection, "connection", "", "sets --param connection=C")
	fs.Var(params, "param", "StorageClass parameter k=v (repeatable)")
	fs.Var(secrets, "secret", "secret k=v (repeatable)")
	fs.Var(&requisite, "requisite", "requisite topology term k=v,k=v (repeatable; terms are ORed)")
	fs.Var(&preferred, "preferred", "preferred topology term k=v,k=v (repeatable, in order)")
	fs.Var(&size, "size", "required_bytes, e.g. 1Gi")
	fs.Var(&limit, "limit", "limit_bytes, e.g. 2Gi")
	fs.StringVar(&srcSnap, "source-snapshot", "", "restore from this snapshot ID")
	fs.StringVar(&srcVol, "source-volume", "", "clone this volume ID")
	vc.add(fs)
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if name == "" {
		return usageError(fs, "--name is required")
	}
	if connection != "" {
		params[pcsi.ConnectionParameter] = connection
	}
	vcap, err := vc.capability(fs)
	if err != nil {
		return err
	}
	req := &csi.CreateVolumeRequest{
		Name: name, Parameters: params, Secrets: secrets, VolumeCapabilities: []*csi.VolumeCapability{vcap},
	}
	if size > 0 || limit > 0 {
		req.CapacityRange = &csi.CapacityRange{RequiredBytes: int64(size), LimitBytes: int64(limit)}
	}
	req2, err := requisite.terms(fs, "requisite", c.prefix)
	if err != nil {
		return err
	}
	pref, err := preferred.terms(fs, "preferred", c.prefix)
	if err != nil {
		return err
	}
	if len(req2) > 0 || len(pref) > 0 {
		req.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: req2, Preferred: pref}
	}
	switch {
	case srcSnap != "" && srcVol != "":
		return usageError(fs, "--source-snapshot and --source-volume exclude each other")
	case srcSnap != "":
		req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: srcSnap}}}
	case srcVol != "":
		req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: srcVol}}}
	}
	return unary(c, fs, "CreateVolume", func(ctx context.Context) (*csi.CreateVolumeResponse, error) {
		return c.controller.CreateVolume(ctx, req)
	}, func(out io.Writer, resp *csi.CreateVolumeResponse) {
		fmt.Fprintf(out, "created volume %s\n", resp.GetVolume().GetVolumeId())
		printVolume(out, resp.GetVolume())
	})
}

func printVolume(out io.Writer, v *csi.Volume) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "  capacity:\t%s\n", sizeText(v.GetCapacityBytes()))
	fmt.Fprintf(w, "  accessible_topology:\t%s\n", topologyText(v.GetAccessibleTopology()))
	if len(v.GetVolumeContext()) > 0 {
		fmt.Fprintf(w, "  volume_context:\t%s\n", formatMap(v.GetVolumeContext()))
	}
	if src := v.GetContentSource(); src != nil {
		switch {
		case src.GetSnapshot() != nil:
			fmt.Fprintf(w, "  source:\tsnapshot %s\n", src.GetSnapshot().GetSnapshotId())
		case src.GetVolume() != nil:
			fmt.Fprintf(w, "  source:\tvolume %s\n", src.GetVolume().GetVolumeId())
		}
	}
	w.Flush()
}

func (c *csiClient) deleteVolume(fs *flag.FlagSet, args []string) error {
	secrets := kvFlag{}
	fs.Var(secrets, "secret", "secret k=v (repeatable)")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	return unary(c, fs, "DeleteVolume", func(ctx context.Context) (*csi.DeleteVolumeResponse, error) {
		return c.controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: pos[0], Secrets: secrets})
	}, func(out io.Writer, resp *csi.DeleteVolumeResponse) { fmt.Fprintf(out, "deleted volume %s\n", pos[0]) })
}

func (c *csiClient) getVolume(fs *flag.FlagSet, args []string) error {
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	return unary(c, fs, "ControllerGetVolume", func(ctx context.Context) (*csi.ControllerGetVolumeResponse, error) {
		return c.controller.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: pos[0]})
	}, func(out io.Writer, resp *csi.ControllerGetVolumeResponse) {
		fmt.Fprintf(out, "volume %s\n", resp.GetVolume().GetVolumeId())
		printVolume(out, resp.GetVolume())
		if ids := resp.GetStatus().GetPublishedNodeIds(); len(ids) > 0 {
			fmt.Fprintf(out, "  published_node_ids:   %s\n", strings.Join(ids, ", "))
		}
	})
}

func (c *csiClient) expandVolume(fs *flag.FlagSet, args []string) error {
	var size sizeFlag
	secrets := kvFlag{}
	fs.Var(&size, "size", "new required_bytes, e.g. 2Gi (required)")
	fs.Var(secrets, "secret", "secret k=v (repeatable)")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	if size == 0 {
		return usageError(fs, "--size is required")
	}
	return unary(c, fs, "ControllerExpandVolume", func(ctx context.Context) (*csi.ControllerExpandVolumeResponse, error) {
		return c.controller.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{
			VolumeId: pos[0], CapacityRange: &csi.CapacityRange{RequiredBytes: int64(size)}, Secrets: secrets})
	}, func(out io.Writer, resp *csi.ControllerExpandVolumeResponse) {
		fmt.Fprintf(out, "expanded volume %s to %s; node expansion required: %t\n", pos[0], sizeText(resp.GetCapacityBytes()), resp.GetNodeExpansionRequired())
	})
}

func (c *csiClient) listVolumes(fs *flag.FlagSet, args []string) error {
	var maxEntries int
	fs.IntVar(&maxEntries, "max", 0, "max_entries per page; every page is fetched (0: the driver's choice)")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if maxEntries < 0 || maxEntries > math.MaxInt32 {
		return usageError(fs, "--max %d is out of range", maxEntries)
	}
	ctx, cancel, err := c.dial(fs)
	if err != nil {
		return err
	}
	defer cancel()
	all := &csi.ListVolumesResponse{}
	pages := 0
	for tok := ""; ; {
		resp, err := c.controller.ListVolumes(ctx, &csi.ListVolumesRequest{MaxEntries: int32(maxEntries), StartingToken: tok})
		if err != nil {
			return rpcFailed("ListVolumes", err)
		}
		pages++
		all.Entries = append(all.Entries, resp.GetEntries()...)
		if tok = resp.GetNextToken(); tok == "" {
			break
		}
	}
	return c.emit(all, func(out io.Writer) {
		w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "VOLUME ID\tCAPACITY\tACCESSIBLE TOPOLOGY\tPUBLISHED ON")
		for _, e := range all.GetEntries() {
			v := e.GetVolume()
			top := "everywhere"
			if len(v.GetAccessibleTopology()) > 0 {
				top = formatTerms(v.GetAccessibleTopology())
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", v.GetVolumeId(), formatSize(v.GetCapacityBytes()),
				top, strings.Join(e.GetStatus().GetPublishedNodeIds(), ","))
		}
		w.Flush()
		fmt.Fprintf(out, "%d %s (%d %s)\n", len(all.Entries), plural(len(all.Entries), "volume", "volumes"), pages, plural(pages, "page", "pages"))
	})
}

func (c *csiClient) getCapacity(fs *flag.FlagSet, args []string) error {
	var connection string
	params := kvFlag{}
	var topology termsFlag
	var vc capFlags
	var withCap bool
	fs.StringVar(&connection, "connection", "", "sets --param connection=C")
	fs.Var(params, "param", "StorageClass parameter k=v (repeatable)")
	fs.Var(&topology, "topology", "accessible_topology k=v,k=v (one term)")
	fs.BoolVar(&withCap, "with-capability", false, "send a volume capability built from --access-mode/--fs-type/--block")
	vc.add(fs)
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if len(topology) > 1 {
		return usageError(fs, "--topology takes one term; GetCapacity asks about one place")
	}
	terms, err := topology.terms(fs, "topology", c.prefix)
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
		vcap, err := vc.capability(fs)
		if err != nil {
			return err
		}
		req.VolumeCapabilities = []*csi.VolumeCapability{vcap}
	}
	return unary(c, fs, "GetCapacity", func(ctx context.Context) (*csi.GetCapacityResponse, error) {
		return c.controller.GetCapacity(ctx, req)
	}, func(out io.Writer, resp *csi.GetCapacityResponse) {
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
	})
}

func (c *csiClient) createSnapshot(fs *flag.FlagSet, args []string) error {
	var name, source string
	params, secrets := kvFlag{}, kvFlag{}
	fs.StringVar(&name, "name", "", "snapshot name (required)")
	fs.StringVar(&source, "source-volume", "", "volume ID to snapshot (required)")
	fs.Var(params, "param", "VolumeSnapshotClass parameter k=v (repeatable)")
	fs.Var(secrets, "secret", "secret k=v (repeatable)")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if name == "" || source == "" {
		return usageError(fs, "--name and --source-volume are required")
	}
	return unary(c, fs, "CreateSnapshot", func(ctx context.Context) (*csi.CreateSnapshotResponse, error) {
		return c.controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: source, Parameters: params, Secrets: secrets})
	}, func(out io.Writer, resp *csi.CreateSnapshotResponse) {
		s := resp.GetSnapshot()
		fmt.Fprintf(out, "created snapshot %s of %s (size %s, ready_to_use=%t)\n", s.GetSnapshotId(), s.GetSourceVolumeId(), formatSize(s.GetSizeBytes()), s.GetReadyToUse())
	})
}

func (c *csiClient) deleteSnapshot(fs *flag.FlagSet, args []string) error {
	secrets := kvFlag{}
	fs.Var(secrets, "secret", "secret k=v (repeatable)")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	return unary(c, fs, "DeleteSnapshot", func(ctx context.Context) (*csi.DeleteSnapshotResponse, error) {
		return c.controller.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: pos[0], Secrets: secrets})
	}, func(out io.Writer, resp *csi.DeleteSnapshotResponse) {
		fmt.Fprintf(out, "deleted snapshot %s\n", pos[0])
	})
}

func (c *csiClient) listSnapshots(fs *flag.FlagSet, args []string) error {
	var maxEntries int
	var source, id string
	fs.IntVar(&maxEntries, "max", 0, "max_entries per page; every page is fetched")
	fs.StringVar(&source, "source-volume", "", "only snapshots of this volume ID")
	fs.StringVar(&id, "snapshot-id", "", "only this snapshot ID")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if maxEntries < 0 || maxEntries > math.MaxInt32 {
		return usageError(fs, "--max %d is out of range", maxEntries)
	}
	ctx, cancel, err := c.dial(fs)
	if err != nil {
		return err
	}
	defer cancel()
	all := &csi.ListSnapshotsResponse{}
	pages := 0
	for tok := ""; ; {
		resp, err := c.controller.ListSnapshots(ctx, &csi.ListSnapshotsRequest{MaxEntries: int32(maxEntries), StartingToken: tok, SourceVolumeId: source, SnapshotId: id})
		if err != nil {
			return rpcFailed("ListSnapshots", err)
		}
		pages++
		all.Entries = append(all.Entries, resp.GetEntries()...)
		if tok = resp.GetNextToken(); tok == "" {
			break
		}
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
}

// nodeFlags are what stage and publish share.
type nodeFlags struct {
	volume                string
	volumeCtx, publishCtx kvFlag
	secrets               kvFlag
	vc                    capFlags
}

func (n *nodeFlags) add(fs *flag.FlagSet, withCapability bool) {
	n.volumeCtx, n.publishCtx, n.secrets = kvFlag{}, kvFlag{}, kvFlag{}
	fs.StringVar(&n.volume, "volume", "", "volume ID (required)")
	if withCapability {
		fs.Var(n.volumeCtx, "context", "volume_context k=v (repeatable; what CreateVolume returned)")
		fs.Var(n.publishCtx, "publish-context", "publish_context k=v (repeatable; what ControllerPublish returned)")
		fs.Var(n.secrets, "secret", "secret k=v (repeatable)")
		n.vc.add(fs)
	}
}

func (c *csiClient) stage(fs *flag.FlagSet, args []string) error {
	var n nodeFlags
	var staging string
	n.add(fs, true)
	fs.StringVar(&staging, "staging", "", "staging_target_path (required)")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if n.volume == "" || staging == "" {
		return usageError(fs, "--volume and --staging are required")
	}
	vcap, err := n.vc.capability(fs)
	if err != nil {
		return err
	}
	return unary(c, fs, "NodeStageVolume", func(ctx context.Context) (*csi.NodeStageVolumeResponse, error) {
		return c.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
			VolumeId: n.volume, StagingTargetPath: staging, VolumeCapability: vcap,
			VolumeContext: n.volumeCtx, PublishContext: n.publishCtx, Secrets: n.secrets})
	}, func(out io.Writer, resp *csi.NodeStageVolumeResponse) {
		fmt.Fprintf(out, "staged volume %s at %s\n", n.volume, staging)
	})
}

func (c *csiClient) unstage(fs *flag.FlagSet, args []string) error {
	var n nodeFlags
	var staging string
	n.add(fs, false)
	fs.StringVar(&staging, "staging", "", "staging_target_path (required)")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if n.volume == "" || staging == "" {
		return usageError(fs, "--volume and --staging are required")
	}
	return unary(c, fs, "NodeUnstageVolume", func(ctx context.Context) (*csi.NodeUnstageVolumeResponse, error) {
		return c.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: n.volume, StagingTargetPath: staging})
	}, func(out io.Writer, resp *csi.NodeUnstageVolumeResponse) {
		fmt.Fprintf(out, "unstaged volume %s from %s\n", n.volume, staging)
	})
}

func (c *csiClient) publish(fs *flag.FlagSet, args []string) error {
	var n nodeFlags
	var target, staging string
	var readonly bool
	n.add(fs, true)
	fs.StringVar(&target, "target", "", "target_path (required)")
	fs.StringVar(&staging, "staging", "", "staging_target_path, if the volume was staged")
	fs.BoolVar(&readonly, "readonly", false, "publish read-only")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if n.volume == "" || target == "" {
		return usageError(fs, "--volume and --target are required")
	}
	vcap, err := n.vc.capability(fs)
	if err != nil {
		return err
	}
	return unary(c, fs, "NodePublishVolume", func(ctx context.Context) (*csi.NodePublishVolumeResponse, error) {
		return c.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
			VolumeId: n.volume, TargetPath: target, StagingTargetPath: staging, Readonly: readonly,
			VolumeCapability: vcap, VolumeContext: n.volumeCtx, PublishContext: n.publishCtx, Secrets: n.secrets})
	}, func(out io.Writer, resp *csi.NodePublishVolumeResponse) {
		fmt.Fprintf(out, "published volume %s at %s\n", n.volume, target)
	})
}

func (c *csiClient) unpublish(fs *flag.FlagSet, args []string) error {
	var n nodeFlags
	var target string
	n.add(fs, false)
	fs.StringVar(&target, "target", "", "target_path (required)")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if n.volume == "" || target == "" {
		return usageError(fs, "--volume and --target are required")
	}
	return unary(c, fs, "NodeUnpublishVolume", func(ctx context.Context) (*csi.NodeUnpublishVolumeResponse, error) {
		return c.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: n.volume, TargetPath: target})
	}, func(out io.Writer, resp *csi.NodeUnpublishVolumeResponse) {
		fmt.Fprintf(out, "unpublished volume %s from %s\n", n.volume, target)
	})
}
