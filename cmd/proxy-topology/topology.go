package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/config"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
	"github.com/democratic-csi/proxy-topology/pkg/ids"
	"github.com/democratic-csi/proxy-topology/pkg/labels"
	"github.com/democratic-csi/proxy-topology/pkg/nodetopology"
)

// multi collects a repeatable flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, " ") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

// topologyCmd is the admin's dry run: which segments would this node
// report, and would CreateVolume succeed for a connection and request.
// Exit codes: 0 ok, 1 the node has no segment or CreateVolume would fail,
// 2 bad flags or config.
func topologyCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("topology", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfgPath, nodeName, hostname, conn, folder string
		live                                      bool
		envs, files, labels, requisite, preferred multi
	)
	fs.StringVar(&cfgPath, "config", env("PROXY_TOPOLOGY_CONFIG"), "main config file; empty uses the built-in example config")
	fs.StringVar(&nodeName, "node-name", defaultNodeID(), "node name the rules see (env CSI_NODE_ID, then NODE_NAME, then the hostname: serve's --node-id)")
	fs.StringVar(&hostname, "hostname", "", "hostname the rules see")
	fs.Var(&envs, "env", "K=V env var the rules see (repeatable)")
	fs.Var(&files, "file", "PATH=CONTENT file the rules see (repeatable)")
	fs.Var(&labels, "label", "K=V node label the rules see (repeatable)")
	fs.BoolVar(&live, "live", false, "read hostname, env vars and files from this machine (flags still win)")
	fs.StringVar(&conn, "connection", "", "connection to check a CreateVolume against")
	fs.StringVar(&folder, "connections-folder", "", "folder with <connection>.yaml; default proxy.configFolder")
	fs.Var(&requisite, "requisite", "requisite term k=v,k=v (repeatable; terms are ORed; short keys get the prefix)")
	fs.Var(&preferred, "preferred", "preferred term k=v,k=v (repeatable, in order)")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: proxy-topology topology [flags]\n\nPrints the segments a node would report and why each rule matched or not;\nwith --connection, whether CreateVolume would succeed and its accessible_topology.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "proxy-topology topology: "+format+"\n", a...)
		return 2
	}

	var cfg *config.Loaded
	var err error
	if cfgPath != "" {
		cfg, err = config.LoadMainFile(cfgPath)
	} else {
		data, _ := examplesProxyYAML()
		cfg, err = config.LoadMain("(built-in examples/proxy.yaml)", data, os.Environ())
	}
	if err != nil {
		return fail("%v", err)
	}
	if cfg.Driver != config.DriverProxy {
		return fail("config %s serves driver %s, which has no topology", cfg.File, cfg.Driver)
	}
	ev := cfg.Topology

	in := nodetopology.Inputs{NodeName: nodeName, Hostname: hostname, Env: map[string]string{}, Files: map[string]nodetopology.FileInput{}}
	if live {
		in = nodetopology.Gather(context.Background(), ev, nodeName, nil)
		if hostname != "" {
			in.Hostname = hostname
		}
	}
	for _, kv := range envs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fail("--env %q: want K=V", kv)
		}
		in.Env[k] = v
	}
	for _, kv := range files {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fail("--file %q: want PATH=CONTENT", kv)
		}
		in.Files[k] = nodetopology.FileInput{Content: v}
	}
	if len(labels) > 0 {
		in.Labels = map[string]string{}
		for _, kv := range labels {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return fail("--label %q: want K=V", kv)
			}
			in.Labels[k] = v
		}
	}

	res := ev.Evaluate(in)
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
	for _, k := range sortedKeys(res.Segments) {
		fmt.Fprintf(stdout, "  %s=%s\n", k, res.Segments[k])
	}
	code := 0
	if err := res.Err(); err != nil {
		fmt.Fprintf(stdout, "NodeGetInfo would fail: %s\n", status.Convert(err).Message())
		code = 1
	}
	if conn == "" {
		return code
	}

	if folder == "" {
		folder = cfg.Proxy.ConfigFolder
	}
	req := &csi.TopologyRequirement{}
	for _, t := range requisite {
		seg, err := parseTerm(t, ev.Prefix())
		if err != nil {
			return fail("--requisite: %v", err)
		}
		req.Requisite = append(req.Requisite, seg)
	}
	for _, t := range preferred {
		seg, err := parseTerm(t, ev.Prefix())
		if err != nil {
			return fail("--preferred: %v", err)
		}
		req.Preferred = append(req.Preferred, seg)
	}
	terms := fmt.Sprintf("  requisite: %s\n  preferred: %s\n", formatTerms(req.Requisite), formatTerms(req.Preferred))
	// The server refuses a name that can never be a connection before it
	// looks for a file (connection.Store.Get), whatever the folder holds.
	if err := ids.ValidateConnectionName(conn); err != nil {
		fmt.Fprintf(stdout, "connection %q:\n%s", conn, terms)
		fmt.Fprintf(stdout, "  CreateVolume: %s: %v: %v\n", codes.InvalidArgument, connection.ErrInvalidName, err)
		return 1
	}
	src := connection.NewFolderSource(folder)
	file := src.Describe(conn)
	data, err := src.Read(conn)
	if err != nil {
		return fail("connection %q: %v", conn, err)
	}
	opts := ev.Accessibility()
	c, _, err := config.ParseConnection(file, data, opts)
	if err != nil {
		return fail("connection %q: %v", conn, err)
	}
	fmt.Fprintf(stdout, "connection %q (%s):\n%s", conn, file, terms)
	top, err := accessible.Decide(conn, req, c.Proxy.PerDriver.Topology, opts)
	if err != nil {
		st := status.Convert(err)
		fmt.Fprintf(stdout, "  CreateVolume: %s: %s\n", st.Code(), st.Message())
		return 1
	}
	fmt.Fprintln(stdout, "  CreateVolume: OK")
	if top == nil {
		fmt.Fprintln(stdout, "  accessible_topology: none (reachable from every node)")
	} else {
		fmt.Fprintf(stdout, "  accessible_topology: %s\n", formatTerms(top))
	}
	return code
}

// parseTerm reads k=v,k=v; short keys get the prefix like node rules do.
func parseTerm(s, prefix string) (*csi.Topology, error) {
	seg := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q: want k=v,k=v", s)
		}
		seg[labels.FullKey(prefix, k)] = v
	}
	return &csi.Topology{Segments: seg}, nil
}

func formatTerms(ts []*csi.Topology) string {
	if len(ts) == 0 {
		return "[]"
	}
	parts := make([]string, len(ts))
	for i, t := range ts {
		segs := t.GetSegments()
		kv := make([]string, 0, len(segs))
		for _, k := range sortedKeys(segs) {
			kv = append(kv, k+"="+segs[k])
		}
		parts[i] = "{" + strings.Join(kv, ", ") + "}"
	}
	return "[" + strings.Join(parts, " OR ") + "]"
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
