package main

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/democratic-csi/proxy-topology/pkg/backend"
	"github.com/democratic-csi/proxy-topology/pkg/clip"
	"github.com/democratic-csi/proxy-topology/pkg/config"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
	"github.com/democratic-csi/proxy-topology/pkg/ids"
	"github.com/democratic-csi/proxy-topology/pkg/labels"
	"github.com/democratic-csi/proxy-topology/pkg/nodetopology"
)

// checkResult is the verdict on one file: errors make it fail, warnings
// are printed but pass.
type checkResult struct {
	path             string
	errors, warnings []string
}

// line is the file's report: its name (shown), then the verdict, on one
// line whatever the name or the messages hold, so a CI job that reads
// "<file>: ok" cannot be fed a forged one.
func (r checkResult) line() string {
	name := shown(r.path)
	switch {
	case len(r.errors) > 0 && len(r.warnings) > 0:
		return name + ": error: " + oneLine(strings.Join(r.errors, "; ")) + "; warning: " + oneLine(strings.Join(r.warnings, "; "))
	case len(r.errors) > 0:
		return name + ": error: " + oneLine(strings.Join(r.errors, "; "))
	case len(r.warnings) > 0:
		return name + ": warning: " + oneLine(strings.Join(r.warnings, "; "))
	}
	return name + ": ok"
}

// maxShownPath bounds a file name in check's report.
const maxShownPath = 1024

// shown is a file name as check's report and messages show it: bare when
// it is plain text, else quoted in Go %q style (a newline, an ESC, a
// quote), and cut to maxShownPath bytes.
func shown(path string) string { return clip.PlainN(path, maxShownPath) }

// oneLine escapes, Go style, every character of s that is not printable
// (a newline, a carriage return, an ESC, invalid UTF-8), so a message
// that quotes something from a file (a base path, a key) stays on its
// line and sends nothing to the terminal.
func oneLine(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var sb strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&sb, `\x%02x`, s[i])
		case !unicode.IsPrint(r):
			q := strconv.QuoteRune(r)
			sb.WriteString(q[1 : len(q)-1])
		default:
			sb.WriteString(s[i : i+size])
		}
		i += size
	}
	return sb.String()
}

func newCheckCommand() *cobra.Command {
	var cfgPath, folder, endpoint string
	var upstreamTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "check --config PATH [--connections-folder DIR]",
		Short: "Validate the main config and every connection file",
		Long: `Validates the main config and every connection file the proxy would read,
without starting anything, so it can gate a GitOps change in CI or run as an
init container. Prints one line per file (ok, warning: …, error: …) and a
summary.

--connections-folder checks a folder other than proxy.configFolder, e.g. the
checkout whose files go into the connections Secret (check never reads a
Secret).

A connection whose endpoint is the proxy's own socket (--csi-endpoint) is
an error. With --upstream-timeout (e.g. 3s) check also asks each
connection's upstream (GetPluginInfo and the capability calls) and prints
what proxy.capabilities would advertise, and refuses a connection whose
upstream routes back to the proxy (another proxy-topology whose
connections lead here). A built-in local-hostpath connection is asked
through a throwaway driver on an empty temporary directory, never its real
base path. Without it, check is offline.

Exit codes: 0 no errors (warnings pass), 1 any file has an error, 2 bad flags.`,
		Example: `  proxy-topology check --config /etc/proxy-topology/proxy.yaml
  proxy-topology check --config deploy/proxy.yaml --connections-folder deploy/connections`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfgPath == "" {
				return usagef("--config is required")
			}
			if upstreamTimeout < 0 {
				return usagef("--upstream-timeout %s is negative", upstreamTimeout)
			}
			return check(cmd.OutOrStdout(), cfgPath, folder, endpoint, upstreamTimeout)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&cfgPath, "config", env("PROXY_TOPOLOGY_CONFIG"), "main config file (env PROXY_TOPOLOGY_CONFIG)")
	fs.StringVar(&folder, "connections-folder", "", "check the connection files here instead of proxy.configFolder (e.g. a GitOps checkout)")
	fs.DurationVar(&upstreamTimeout, "upstream-timeout", 0, "ask each connection's upstream, waiting this long, to print what proxy.capabilities would advertise and to find connections that route back to the proxy through another proxy-topology; 0 (the default): check stays offline")
	fs.StringVar(&endpoint, "csi-endpoint", or(env("CSI_ENDPOINT"), pcsi.DefaultEndpoint), "the proxy's own socket; a connection pointing at it is an error (env CSI_ENDPOINT)")
	return cmd
}

// check prints the verdict on the main config at cfgPath and on every
// connection file in folder (default proxy.configFolder); an error in any
// file fails it (exit 1, after the whole report).
func check(stdout io.Writer, cfgPath, folder, endpoint string, upstreamTimeout time.Duration) error {
	results, cfg := checkMain(cfgPath)
	capsLine := ""
	if cfg != nil && cfg.Driver == config.DriverProxy {
		if folder == "" {
			folder = cfg.Proxy.ConfigFolder
		}
		if folder == "" {
			// Connections come from a Secret, which check (offline by
			// design) does not read: the files are checked where they are
			// kept, before they go into the Secret.
			results[0].warnings = append(results[0].warnings, fmt.Sprintf(
				"connections come from secret %s, which check does not read; check the files before they go into it with --connections-folder DIR",
				cfg.Proxy.ConfigSecret))
		} else {
			results = append(results, checkFolder(folder, cfg, endpoint, &results[0])...)
			probe := upstreamProbe{}
			if upstreamTimeout > 0 {
				probe = probeUpstreams(folder, cfg, endpoint, upstreamTimeout)
			}
			for i := range results {
				// An own socket found by its path is reported already.
				if why, ok := probe.refused[results[i].path]; ok && !strings.Contains(why, "own socket") {
					results[i].errors = append(results[i].errors, why)
				}
			}
			capsLine = probe.line
		}
	}

	var ok, warned, failed int
	for _, r := range results {
		fmt.Fprintln(stdout, r.line())
		switch {
		case len(r.errors) > 0:
			failed++
		case len(r.warnings) > 0:
			warned++
		default:
			ok++
		}
	}
	if capsLine != "" {
		fmt.Fprintln(stdout, capsLine)
	}
	fmt.Fprintf(stdout, "checked %d %s: %d ok, %d with warnings, %d with errors\n", len(results), plural(len(results), "file", "files"), ok, warned, failed)
	if failed > 0 {
		return &exitError{code: exitFailed}
	}
	return nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// checkMain loads the main config; cfg is nil when it does not load.
func checkMain(path string) ([]checkResult, *config.Loaded) {
	r := checkResult{path: path}
	data, err := config.ReadFile(path)
	if err != nil {
		r.errors = []string{unwrapPath(err)}
		return []checkResult{r}, nil
	}
	// Messages name the file as the report shows it, so a name with a
	// newline cannot split them.
	name := shown(path)
	cfg, err := config.LoadMain(name, data, os.Environ())
	if err != nil {
		r.errors = flatten(err.Error(), "config "+name+": ")
		return []checkResult{r}, nil
	}
	for _, w := range cfg.Warnings {
		r.warnings = append(r.warnings, flatten(w, "config "+name+": ")...)
	}
	return []checkResult{r}, cfg
}

// checkFolder checks every file the proxy would read from folder, in
// connection-name order. Findings about the main config (a default
// connection without a file) are added to mainResult.
func checkFolder(folder string, cfg *config.Loaded, ownEndpoint string, mainResult *checkResult) []checkResult {
	des, err := os.ReadDir(folder)
	if err != nil {
		return []checkResult{{path: folder, errors: []string{"cannot read the connection folder: " + unwrapPath(err)}}}
	}
	type file struct{ name, path string }
	var files []file
	var out []checkResult
	for _, de := range des {
		n := de.Name()
		// Kubernetes mounts a Secret as ..data and ..<timestamp>
		// directories plus symlinks; only the symlinks are files.
		if strings.HasPrefix(n, ".") || de.IsDir() {
			continue
		}
		p := filepath.Join(folder, n)
		switch filepath.Ext(n) {
		case ".yaml":
			name := strings.TrimSuffix(n, ".yaml")
			if err := ids.ValidateConnectionName(name); err != nil {
				out = append(out, checkResult{path: p, warnings: []string{fmt.Sprintf("ignored by the proxy: %v", err)}})
				continue
			}
			files = append(files, file{name, p})
		case ".yml":
			out = append(out, checkResult{path: p, warnings: []string{fmt.Sprintf("ignored by the proxy, which reads only <connection>.yaml; rename it to %s", shown(strings.TrimSuffix(n, ".yml")+".yaml"))}})
		}
	}
	// Connection-name order, as the proxy lists them ("a-b" < "a").
	slices.SortFunc(files, func(a, b file) int { return strings.Compare(a.name, b.name) })
	if len(files) == 0 {
		out = append([]checkResult{{path: folder, warnings: []string{"no connection files: every call that names a connection will fail"}}}, out...)
	}
	if d := cfg.Proxy.DefaultConnection; d != "" && !slices.ContainsFunc(files, func(f file) bool { return f.name == d }) {
		mainResult.warnings = append(mainResult.warnings, fmt.Sprintf("proxy.defaultConnection %q has no file %s.yaml in %s", d, d, folder))
	}
	produced := producibleKeys(cfg.Topology)
	var checked []checkResult
	for _, f := range files {
		// Each file is read once and parsed once, as the kind it says it is.
		data, err := config.ReadFile(f.path)
		switch {
		case err != nil:
			checked = append(checked, checkResult{path: f.path, errors: []string{unwrapPath(err)}})
			continue
		case config.IsGroupFile(data):
			checked = append(checked, checkGroupFile(f.path, f.name, data, folder, cfg.Topology.Accessibility()))
			continue
		}
		r, c := checkConnection(f.path, data, cfg.Topology, produced, ownEndpoint)
		checkIDRoom(&r, f.name, cfg.Proxy.MaxIDLength)
		checkNodeLocal(&r, c, cfg)
		checkBasePath(&r, f.name, c)
		checked = append(checked, r)
	}
	return append(checked, out...)
}

// checkBasePath warns when the base path of local-hostpath connection
// name is not where its volumes are: a directory next to it holds the
// marker of another base path of the same connection, with volumes
// (hostpath.InspectBasePath). Its shareBasePath changed while it held
// volumes, and calls on them fail with FAILED_PRECONDITION. Where the old
// base path is not next to the new one, check cannot tell.
func checkBasePath(r *checkResult, name string, c *config.Connection) {
	if len(r.errors) > 0 || c == nil || c.Driver != config.DriverLocalHostpath {
		return
	}
	base := filepath.Clean(c.LocalHostpath.ShareBasePath)
	rep := hostpath.InspectBasePath(base, name)
	for _, o := range rep.Elsewhere {
		what := "holds no base path marker (meta/basepath.json) yet"
		if rep.Marked {
			what = "is another base path (fingerprint " + rep.Fingerprint + ")"
		}
		r.warnings = append(r.warnings, fmt.Sprintf(
			"local-hostpath.shareBasePath %s %s, while %s next to it holds %d %s of connection %q (fingerprint %s): they are not reachable through this base path, and calls on them fail with FAILED_PRECONDITION; set shareBasePath back, or move %s as a whole to %s, in place of what is there (docs/operations.md, \"Moving a connection's storage\")",
			base, what, o.Path, o.Volumes, plural(o.Volumes, "volume", "volumes"), name, o.Fingerprint, o.Path, base))
	}
}

// producibleKeys are the full keys some node can report: the base segment
// of the type and every rule's key. Whether a rule matches on a given node
// is unknowable here; a key no rule names can never be reported.
func producibleKeys(ev *nodetopology.Evaluator) map[string]bool {
	keys := map[string]bool{}
	switch ev.Type() {
	case nodetopology.TypeCluster:
		keys[labels.FullKey(ev.Prefix(), "cluster")] = true
	case nodetopology.TypeNode:
		keys[labels.FullKey(ev.Prefix(), "node")] = true
	}
	for _, r := range ev.Rules() {
		keys[labels.FullKey(ev.Prefix(), r.TopologyKey)] = true
	}
	return keys
}

// checkConnection checks an ordinary connection file's content data and
// returns the connection it parses to (nil if it does not).
func checkConnection(path string, data []byte, ev *nodetopology.Evaluator, produced map[string]bool, ownEndpoint string) (checkResult, *config.Connection) {
	r := checkResult{path: path}
	name := shown(path)
	c, warnings, err := config.ParseConnection(name, data, ev.Accessibility())
	for _, w := range warnings {
		r.warnings = append(r.warnings, flatten(w, "file "+name+": ")...)
	}
	if err != nil {
		r.errors = flatten(err.Error(), "file "+name+": ")
		return r, nil
	}
	if c.Driver == config.DriverCSI {
		for _, ep := range []struct{ key, value string }{{"csi.endpoint", c.CSI.Endpoint}, {"csi.nodeEndpoint", c.CSI.NodeEndpoint}} {
			if ep.value != "" && backend.SameSocket(ep.value, ownEndpoint) {
				r.errors = append(r.errors, fmt.Sprintf("%s %s is the proxy's own socket: the proxy refuses the connection (calls would loop back into it)", ep.key, ep.value))
			}
		}
	}
	seenExtra := map[string]bool{}
	for i, e := range c.Proxy.PerDriver.Topology {
		for _, k := range slices.Sorted(maps.Keys(e.Requirements)) {
			full := labels.FullKey(ev.Prefix(), k)
			if !produced[full] {
				r.warnings = append(r.warnings, fmt.Sprintf(
					"proxy.perDriver.topology[%d].requirements[%q]: no node reports %s (no fromRegexp rule has that key, nor does type %s): only nodes labelled by other means can use the volumes",
					i, k, full, ev.Type()))
			}
		}
		for _, k := range slices.Sorted(maps.Keys(e.Extra)) {
			label := k + "=" + e.Extra[k]
			if seenExtra[label] {
				continue
			}
			seenExtra[label] = true
			how := "the proxy does not report it, so it must be set on the nodes by other means"
			if produced[k] {
				how = "a fromRegexp rule reports this key; nodes where it yields another value cannot use the volumes"
			}
			r.warnings = append(r.warnings, fmt.Sprintf("proxy.perDriver.topology[%d].extra: volumes are usable only on nodes labelled %s; %s", i, label, how))
		}
	}
	checkUpstreamTopology(&r, c, ev, produced)
	return r, c
}

// flatten turns a (possibly errors.Join-ed, possibly multi-line) message
// into one-line parts without the leading "file X: " that every line of the
// output already shows. A line ending in ':' heads the lines after it.
func flatten(msg, prefix string) []string {
	var parts []string
	for _, l := range strings.Split(msg, "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(l, prefix))
		if l == "" {
			continue
		}
		if n := len(parts); n > 0 && strings.HasSuffix(parts[n-1], ":") {
			parts[n-1] += " " + l
			continue
		}
		parts = append(parts, l)
	}
	return parts
}

// unwrapPath drops the path from an *os.PathError: the line already starts
// with it.
func unwrapPath(err error) string {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Op + ": " + pe.Err.Error()
	}
	return err.Error()
}
