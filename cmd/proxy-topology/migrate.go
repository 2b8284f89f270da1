package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/democratic-csi/proxy-topology/internal/migrate"
)

// newMigrateCommand is `proxy-topology migrate`: democratic-csi's proxy
// deployment to this chart's values (internal/migrate, docs/migration.md).
func newMigrateCommand() *cobra.Command {
	var valuesPath, connsPath, csiName, checkPath string
	cmd := &cobra.Command{
		Use:   "migrate --values FILE --connections DIR|SECRET.yaml [--check PVS.json]",
		Short: "Convert a democratic-csi proxy deployment into this chart's values",
		Long: `Reads what a deployment of democratic-csi's proxy driver is made of: its Helm
values (csiDriver.name, and driver.config with the proxy config and
proxy.nodeTopology), or the bare proxy config file with --csi-name, and its
connections (the folder of <name>.yaml files, or the Secret manifest that
holds them). Writes this chart's values to standard output: the same
csiDriver.name and node topology rules, and per connection an
upstreams.<name> entry with the democraticCsi preset holding the
connection's driver config (its proxy: part goes to the rendered
connection; a node-local driver gets upstreamTopology and the node-local
mode). Notes on what is carried differently or not at all go to standard
error.

Drivers that cannot run behind a proxy (zfs-local-ephemeral-inline,
objectivefs, node-manual) are refused by name, and nothing is written.

--check FILE (kubectl get pv -o json, or kubectl get volumesnapshotcontent
-o json) says, instead of writing the values, which connection serves each
handle prefix (v:<connection>/, s:<connection>/) of the driver's objects
after the switch; any object that nothing serves fails it.

Exit codes: 0 written (or every object served), 1 refused (or an object
not served), 2 bad flags or unreadable files.`,
		Example: `  proxy-topology migrate --values democratic-csi-values.yaml --connections connections/ > values.yaml
  kubectl -n democratic-csi get secret connections -o yaml > connections.yaml
  proxy-topology migrate --values proxy.yaml --csi-name org.democratic-csi.proxy --connections connections.yaml > values.yaml
  kubectl get pv -o json > pvs.json
  proxy-topology migrate --values democratic-csi-values.yaml --connections connections/ --check pvs.json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if valuesPath == "" || connsPath == "" {
				return usagef("--values and --connections are required")
			}
			return runMigrate(cmd.OutOrStdout(), cmd.ErrOrStderr(), valuesPath, connsPath, csiName, checkPath)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&valuesPath, "values", "", "democratic-csi's Helm values of the proxy deployment, or its bare proxy config (driver: proxy)")
	fs.StringVar(&connsPath, "connections", "", "the connections: a folder of <name>.yaml files, or a Secret manifest (kubectl get secret connections -o yaml)")
	fs.StringVar(&csiName, "csi-name", "", "the CSI driver name, when --values is a bare proxy config (kubectl get csidriver)")
	fs.StringVar(&checkPath, "check", "", "kubectl get pv -o json (or volumesnapshotcontent) output: say which connection serves each handle prefix after the switch, instead of writing the values")
	return cmd
}

func runMigrate(stdout, stderr io.Writer, valuesPath, connsPath, csiName, checkPath string) error {
	values, err := os.ReadFile(valuesPath)
	if err != nil {
		return configErrorf("--values: %v", err)
	}
	conns, skipped, err := migrate.ReadConnections(connsPath)
	if err != nil {
		return configErrorf("--connections: %v", err)
	}
	var pvs []byte
	if checkPath != "" {
		if pvs, err = os.ReadFile(checkPath); err != nil {
			return configErrorf("--check: %v", err)
		}
	}
	res := migrate.Convert(migrate.Input{ValuesName: valuesPath, Values: values, CSIName: csiName,
		ConnectionsName: connsPath, Connections: conns})
	for _, s := range skipped {
		fmt.Fprintf(stderr, "note: %s\n", s)
	}
	for _, n := range res.Notes {
		fmt.Fprintf(stderr, "note: %s\n", n)
	}
	for _, e := range res.Errors {
		fmt.Fprintf(stderr, "error: %s\n", e)
	}
	if len(res.Errors) > 0 {
		return &exitError{code: exitFailed, err: fmt.Errorf("refused (%d %s); nothing written", len(res.Errors), plural(len(res.Errors), "error", "errors"))}
	}
	if checkPath == "" {
		_, err := stdout.Write(res.Values)
		if err == nil {
			fmt.Fprintf(stderr, "wrote values for %s: %d %s (%d node-local)\n", res.CSIName, len(res.Connections), plural(len(res.Connections), "connection", "connections"), len(res.NodeLocal))
		}
		return err
	}
	rep, err := migrate.Check(checkPath, pvs, res.CSIName, res.Connections)
	if err != nil {
		return configErrorf("--check: %v", err)
	}
	for _, l := range rep.Lines() {
		fmt.Fprintln(stdout, l)
	}
	if n := rep.Unserved(); n > 0 {
		return &exitError{code: exitFailed, err: fmt.Errorf("%d %s of %s not served after the switch", n, plural(n, "object", "objects"), res.CSIName)}
	}
	if len(rep.Prefixes) == 0 {
		return &exitError{code: exitFailed, err: errors.New(checkPath + ": no PersistentVolume or VolumeSnapshotContent of " + res.CSIName)}
	}
	return nil
}
