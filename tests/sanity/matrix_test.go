package sanitytest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"

	"github.com/democratic-csi/proxy-topology/internal/testbin"
	"github.com/democratic-csi/proxy-topology/internal/testupstream"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
)

// The conformance matrix: csi-sanity against each upstream of matrixRows,
// once directly and once through a `proxy-topology serve` process with a
// driver: csi connection to it, with the same skips. The proxy must add no
// failure: every spec that fails through the proxy fails directly too, or
// is a deviation docs/spec.md requires (listed per row, with the message that
// shows it). The table goes to the test log and to $SANITY_REPORT.
//
// The proxy runs with its defaults (proxy.capabilities auto, no
// maxIdLength), so what it advertises follows the upstream.

// matrixBinEnv hands the proxy binary, built once by the parent, to the
// child processes that run the suites.
const matrixBinEnv = "PROXY_TOPOLOGY_MATRIX_BIN"

// matrixConnection is the connection name the proxy runs are made
// through; its length decides how far 120-byte upstream IDs go over 128.
const matrixConnection = "sanity"

func TestSanityMatrix(t *testing.T) {
	t.Parallel()
	if os.Getenv(childTargetEnv) == "" {
		testbin.RequireRoot(t, "the conformance matrix needs root: its upstreams bind-mount volumes")
		bin, cleanup, err := testbin.Build("../..", false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cleanup)
		// Read by the children only; every test of this package that
		// starts children is in this process, so no other reader exists.
		os.Setenv(matrixBinEnv, bin)
	}
	results := make([][2]*sanityResult, len(matrixRows))
	// selected[i] is set when -run selects row i; only those must report.
	selected := make([]bool, len(matrixRows))
	t.Run("rows", func(t *testing.T) {
		for i, row := range matrixRows {
			t.Run(row.name, func(t *testing.T) {
				selected[i] = true
				for m, mode := range []string{"direct", "proxy"} {
					t.Run(mode, func(t *testing.T) {
						t.Parallel()
						results[i][m] = runMatrixTarget(t, row, mode)
					})
				}
			})
		}
	})
	if os.Getenv(childTargetEnv) != "" {
		return
	}
	var table strings.Builder
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "row\tdirect p/f/s\tproxy p/f/s\tadded by the proxy\tby design\tskipped by design\tstands for")
	for i, row := range matrixRows {
		direct, proxy := results[i][0], results[i][1]
		if !selected[i] {
			fmt.Fprintf(tw, "%s\tnot selected\tnot selected\t-\t-\t-\t%s\n", row.name, shortStandsFor(row))
			continue
		}
		if direct == nil || proxy == nil {
			// A child that skipped or broke: a row that did not run
			// proves nothing, so it must not read as a pass.
			t.Errorf("matrix %s: did not run (direct: %s, proxy: %s); see the row's subtests", row.name, counts(direct), counts(proxy))
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t%s\n", row.name, counts(direct), counts(proxy), shortStandsFor(row))
			continue
		}
		c := compareResults(t, row, direct, proxy, true)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\n", row.name, counts(direct), counts(proxy), c.added,
			c.byDesign, c.skipped, shortStandsFor(row))
	}
	tw.Flush()
	head := fmt.Sprintf("sanity conformance matrix (csi-sanity %s; p/f/s = passed/failed/skipped specs; failing through "+
		"the proxy, not directly: added by the proxy (fails the test), by design (docs/spec.md); passing directly, skipped "+
		"through the proxy: skipped by design (declared in the row; any other fails the test)):", csiTestVersion)
	t.Log(head + "\n" + table.String())
	summary(t, head+"\n"+strings.TrimRight(table.String(), "\n"))
}

// csiTestVersion is printed with the table.
const csiTestVersion = "v5.6.0"

func counts(r *sanityResult) string {
	if r == nil {
		return "did not run"
	}
	return fmt.Sprintf("%d/%d/%d", r.Passed, r.Failed, r.Skipped)
}

// shortStandsFor is the driver's name, the part of StandsFor before its
// first parenthesis or colon.
func shortStandsFor(row matrixRow) string {
	s := row.profile.StandsFor
	if i := strings.IndexAny(s, "(:"); i > 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

// proxyFailures counts the specs that fail through the proxy and not
// directly (added, byDesign), and those that pass directly and are
// skipped through the proxy as the row declares (skipped).
type proxyFailures struct{ added, byDesign, skipped int }

// compareResults fails t for every failure the proxy adds to the
// driver's own, for every spec that passes directly and is skipped
// through the proxy without the row declaring it, and for every
// declaration of the row that did not happen. With strictUpstream it also
// checks that the driver's own failures are exactly the ones the row
// declares (a test driver that fails something else is broken).
func compareResults(t *testing.T, row matrixRow, direct, proxy *sanityResult, strictUpstream bool) proxyFailures {
	t.Helper()
	declared := func(list []SkipSpec, spec string) bool {
		return slices.ContainsFunc(list, func(s SkipSpec) bool { return strings.Contains(spec, s.Spec) })
	}
	for _, spec := range sortedKeys(direct.Failures) {
		if !strictUpstream {
			t.Logf("%s: the driver alone fails %s: %s", row.name, spec, firstLine(direct.Failures[spec]))
		} else if !declared(row.upstreamFails, spec) {
			t.Errorf("matrix %s: the driver alone fails %q, which the row does not declare (a broken test driver?): %s",
				row.name, spec, firstLine(direct.Failures[spec]))
		}
	}
	for _, d := range row.upstreamFails {
		if !slices.ContainsFunc(sortedKeys(direct.Failures), func(spec string) bool { return strings.Contains(spec, d.Spec) }) {
			t.Errorf("matrix %s: the row declares that the driver alone fails %q (%s), but it did not", row.name, d.Spec, d.Reason)
		}
	}
	var c proxyFailures
	for _, spec := range sortedKeys(proxy.Failures) {
		msg := proxy.Failures[spec]
		if direct.States[spec] == "failed" {
			continue
		}
		i := slices.IndexFunc(row.proxyDeviations, func(d deviation) bool { return strings.Contains(spec, d.Spec) })
		if i >= 0 && strings.Contains(msg, row.proxyDeviations[i].message) {
			t.Logf("matrix %s: %q fails through the proxy by design: %s", row.name, spec, row.proxyDeviations[i].Reason)
			c.byDesign++
			continue
		}
		c.added++
		t.Errorf("%s: the proxy adds a failure (directly: %s): %s: %s", row.name, orNone(direct.States[spec]), spec, firstLine(msg))
	}
	for _, d := range row.proxyDeviations {
		if !slices.ContainsFunc(sortedKeys(proxy.Failures), func(spec string) bool { return strings.Contains(spec, d.Spec) }) {
			t.Errorf("matrix %s: the row expects %q to fail through the proxy (%s), but it did not: remove it from the row", row.name, d.Spec, d.Reason)
		}
	}
	hidden := func(spec string) bool { return direct.States[spec] == "passed" && proxy.States[spec] == "skipped" }
	for _, spec := range sortedKeys(direct.States) {
		if !hidden(spec) {
			continue
		}
		if i := slices.IndexFunc(row.proxySkips, func(s SkipSpec) bool { return strings.Contains(spec, s.Spec) }); i >= 0 {
			t.Logf("matrix %s: passes directly, skipped through the proxy by design: %s: %s", row.name, spec, row.proxySkips[i].Reason)
			c.skipped++
			continue
		}
		t.Errorf("matrix %s: passes directly but is skipped through the proxy, and the row does not declare why: %s (%s)",
			row.name, spec, proxy.SkipReasons[spec])
	}
	for _, d := range row.proxySkips {
		if !slices.ContainsFunc(sortedKeys(direct.States), func(spec string) bool { return hidden(spec) && strings.Contains(spec, d.Spec) }) {
			t.Errorf("matrix %s: the row expects %q to pass directly and be skipped through the proxy (%s), but it was not: remove it from the row",
				row.name, d.Spec, d.Reason)
		}
	}
	return c
}

func orNone(state string) string {
	if state == "" {
		return "not run"
	}
	return state
}

// runMatrixTarget runs one row in one mode; in the parent it returns the
// child's result.
func runMatrixTarget(t *testing.T, row matrixRow, mode string) *sanityResult {
	target := "matrix-" + row.name + "-" + mode
	cfg := sanity.NewTestConfig()
	if inSanityChild(target) {
		cfg = matrixConfig(t, row, mode)
	}
	return sanityResults(t, target, cfg, row.skips...)
}

// matrixConfig starts the row's driver, and the proxy in front of it in
// mode "proxy", and returns the suite's configuration.
func matrixConfig(t *testing.T, row matrixRow, mode string) sanity.TestConfig {
	t.Helper()
	dir := sanityDir(t)
	up, err := testupstream.Start(filepath.Join(dir, "upstream", "csi.sock"), row.profile, hostpath.Options{
		DriverName: "matrix.sanity.proxy-topology", Version: "sanity", NodeID: "sanity-node",
		BasePath: filepath.Join(dir, "upstream-base"), Stage: row.stage, ControllerPublish: row.controllerPublish,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(up.Stop)

	cfg := sanity.NewTestConfig()
	cfg.TargetPath = filepath.Join(dir, "target")
	cfg.StagingPath = filepath.Join(dir, "staging")
	cfg.TestVolumeSize = 64 << 20
	cfg.TestVolumeExpandSize = 128 << 20
	ids := matrixIDs{profile: row.profile}
	if mode == "direct" {
		cfg.Address = up.Endpoint
		cfg.IDGen = ids
		return cfg
	}
	folder := filepath.Join(dir, "connections")
	if err := os.MkdirAll(folder, 0o750); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{matrixConnection: "driver: csi\ncsi:\n  endpoint: " + up.Endpoint + "\n  timeout: 60s\n" + row.connectionExtra}
	if row.hungNeighbour {
		hung, err := testupstream.Start(filepath.Join(dir, "hung", "csi.sock"), testupstream.Profile{Hang: true}, hostpath.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(hung.Stop)
		files["hung"] = "driver: csi\ncsi:\n  endpoint: " + hung.Endpoint + "\n  timeout: 1s\n"
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(folder, name+".yaml"), []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	topoType := row.nodeTopologyType
	if topoType == "" {
		topoType = "cluster"
	}
	mainCfg := filepath.Join(dir, "proxy.yaml")
	if err := os.WriteFile(mainCfg, []byte(fmt.Sprintf(
		"driver: proxy\ncsiName: matrix.sanity.proxy-topology\nproxy:\n  configFolder: %s\n  defaultConnection: %s\n  controllerPublish: %t\n  nodeTopology:\n    type: %s\n",
		folder, matrixConnection, row.controllerPublish, topoType)), 0o640); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "proxy", "csi.sock")
	startServe(t, os.Getenv(matrixBinEnv), dir, mainCfg, sock)
	cfg.Address = "unix://" + sock
	cfg.TestVolumeParameters = map[string]string{pcsi.ConnectionParameter: matrixConnection}
	ids.prefix = "v:" + matrixConnection + "/"
	cfg.IDGen = ids
	return cfg
}

// startServe runs the proxy binary bin (built by the parent test) with
// main config cfgFile on sock, until the test ends.
func startServe(t *testing.T, bin, dir, cfgFile, sock string) {
	t.Helper()
	if bin == "" {
		t.Fatal("no proxy binary: the parent test builds it and hands it to the child in the environment")
	}
	logFile, err := os.Create(filepath.Join(dir, "proxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--config", cfgFile, "--csi-endpoint", "unix://"+sock,
		"--node-id", "sanity-node", "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			stopProcess(cmd)
			logFile.Close()
		})
	}
	t.Cleanup(func() {
		stop()
		if out, _ := os.ReadFile(logFile.Name()); len(out) > 0 {
			t.Logf("proxy log (warnings and errors):\n%s", tail(out, 60))
		}
	})
	waitProbe(t, sock)
}

// matrixIDs makes IDs of the driver's own shape that name nothing, so the
// not-found specs reach the driver; through the proxy they carry the
// connection in front.
type matrixIDs struct {
	sanity.DefaultIDGenerator
	profile testupstream.Profile
	prefix  string
}

func (g matrixIDs) GenerateUniqueValidVolumeID() string {
	return g.prefix + g.profile.VolumeID("vol-"+randomHex())
}
