package sanitytest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"google.golang.org/grpc"

	"github.com/democratic-csi/proxy-topology/internal/testbin"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
)

// democratic-csi, the seed's project, as a real upstream: its
// local-hostpath driver (node.js) is run from a source tree, csi-sanity
// runs against it directly and through `proxy-topology serve` with a
// driver: csi connection, with the same skips, and the proxy must add no
// failure. democratic-csi is no Go module or registry package, so this
// runs only when DEMOCRATIC_CSI names its source (make interop); the
// tables of the last run are in docs/conformance.md.

const (
	// democraticEnv names the democratic-csi source tree.
	democraticEnv = "DEMOCRATIC_CSI"
	// democraticBinEnv hands the proxy binary to the child processes.
	democraticBinEnv = "PROXY_TOPOLOGY_DEMOCRATIC_BIN"
	// democraticReportEnv, when set, names a file that gets the result
	// tables in Markdown.
	democraticReportEnv = "DEMOCRATIC_CSI_REPORT"
)

// democraticSkips apply to both runs.
var democraticSkips = []SkipSpec{
	{"should fail when requesting to create a snapshot with already existing name and different source volume ID",
		"skipped by democratic-csi's own CI for local-hostpath (.github/workflows/main.yml CSI_SANITY_SKIP): its snapshot ids are made from the source volume id and the name"},
	{"should fail when requesting to create a volume with already existing name and different capacity",
		"skipped by democratic-csi's own CI for local-hostpath (.github/workflows/main.yml CSI_SANITY_SKIP): a directory has no capacity to differ in"},
	{"should fail when volume with single node single writer access mode is already mounted at a different target path",
		"local-hostpath publishes the volume at the second target too (the spec expects FAILED_PRECONDITION) and leaves that bind mount behind, so csi-sanity cannot create its target directory for any later spec: unskipped, this one failure turns into 28 (every later Node Service and ListSnapshots spec), directly and through the proxy alike"},
}

func TestSanityDemocraticCSI(t *testing.T) {
	t.Parallel()
	src := os.Getenv(democraticEnv)
	if src == "" {
		if os.Getenv(childTargetEnv) == "" {
			summary(t, "sanity democratic-csi: SKIPPED, "+democraticEnv+" names no democratic-csi source (make interop DEMOCRATIC_CSI=/path)")
		}
		t.Skipf("%s is not set: it names a democratic-csi source tree to run csi-sanity against its local-hostpath driver, "+
			"directly and through the proxy (make interop DEMOCRATIC_CSI=/path; docs/conformance.md)", democraticEnv)
	}
	if os.Getenv(childTargetEnv) == "" {
		if err := checkDemocratic(src); err != nil {
			t.Fatal(err)
		}
		testbin.RequireRoot(t, "democratic-csi's local-hostpath bind-mounts volumes")
		bin, cleanup, err := testbin.Build("../..", false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cleanup)
		os.Setenv(democraticBinEnv, bin) // read by the children only
	}
	var results [2]*sanityResult
	t.Run("runs", func(t *testing.T) {
		for m, mode := range []string{"direct", "proxy"} {
			t.Run(mode, func(t *testing.T) {
				t.Parallel()
				target := "democratic-csi-" + mode
				cfg := sanity.NewTestConfig()
				if inSanityChild(target) {
					cfg = democraticConfig(t, src, mode)
				}
				results[m] = sanityResults(t, target, cfg, democraticSkips...)
			})
		}
	})
	if os.Getenv(childTargetEnv) != "" || results[0] == nil || results[1] == nil {
		return
	}
	row := matrixRow{name: "democratic-csi local-hostpath", skips: democraticSkips}
	added := compareResults(t, row, results[0], results[1], false).added
	report := democraticTables(src, results[0], results[1], added)
	t.Log("\n" + report)
	summary(t, fmt.Sprintf("sanity democratic-csi local-hostpath: direct %s, through the proxy %s (passed/failed/skipped), %d failures added by the proxy",
		counts(results[0]), counts(results[1]), added))
	if path := os.Getenv(democraticReportEnv); path != "" {
		if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// checkDemocratic says what is missing to run the driver from src.
func checkDemocratic(src string) error {
	for _, p := range []string{"bin/democratic-csi", "src/driver/controller-local-hostpath/index.js", "package.json"} {
		if _, err := os.Stat(filepath.Join(src, p)); err != nil {
			return fmt.Errorf("%s=%s is not a democratic-csi source tree (%v); extract one, e.g. "+
				"git --git-dir=<mirror> archive HEAD | tar -x -C <dir> (docs/conformance.md)", democraticEnv, src, err)
		}
	}
	if _, err := os.Stat(filepath.Join(src, "node_modules")); err != nil {
		return fmt.Errorf("%s has no node_modules: run `npm install --omit=dev` there (its Dockerfile: npm install --only=production), or use make interop", src)
	}
	for _, tool := range []string{"node", "rsync"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is not installed: democratic-csi runs on node, and its filecopy snapshots run rsync (its Dockerfile installs both)", tool)
		}
	}
	return nil
}

// democraticConfig starts democratic-csi's local-hostpath, and in mode
// "proxy" the proxy in front of it, and returns the suite's configuration.
func democraticConfig(t *testing.T, src, mode string) sanity.TestConfig {
	t.Helper()
	dir := sanityDir(t)
	sock := startDemocratic(t, src, dir)
	cfg := sanity.NewTestConfig()
	cfg.TargetPath = filepath.Join(dir, "target")
	cfg.StagingPath = filepath.Join(dir, "staging")
	// democratic-csi's CI sizes.
	cfg.TestVolumeSize = 1 << 30
	cfg.TestVolumeExpandSize = 2 << 30
	// local-hostpath answers every volume's accessible_topology (its
	// node), and the proxy keeps it under type node only for a volume
	// pinned to a node the request names: creates carry the node's
	// topology, as the external-provisioner's do. democratic-csi reads no
	// accessibility_requirements (src/driver/controller-client-common
	// @8a4a28a), so the direct run is unchanged by them.
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(provisionerRequirements))
	ids := democraticIDs{}
	if mode == "direct" {
		cfg.Address = "unix://" + sock
		cfg.IDGen = ids
		return cfg
	}
	folder := filepath.Join(dir, "connections")
	if err := os.MkdirAll(folder, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(folder, matrixConnection+".yaml"),
		[]byte("driver: csi\ncsi:\n  endpoint: unix://"+sock+"\n  timeout: 60s\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	// local-hostpath's volumes live on the node that made them, and it
	// says so in accessible_topology: the proxy is run as SPEC §8 says for
	// such an upstream, with nodeTopology.type node.
	mainCfg := filepath.Join(dir, "proxy.yaml")
	if err := os.WriteFile(mainCfg, []byte(fmt.Sprintf(
		"driver: proxy\ncsiName: org.democratic-csi.proxy-topology\nproxy:\n  configFolder: %s\n  defaultConnection: %s\n  nodeTopology:\n    type: node\n",
		folder, matrixConnection)), 0o640); err != nil {
		t.Fatal(err)
	}
	proxySock := filepath.Join(dir, "proxy", "csi.sock")
	startServe(t, os.Getenv(democraticBinEnv), dir, mainCfg, proxySock)
	cfg.Address = "unix://" + proxySock
	cfg.TestVolumeParameters = map[string]string{pcsi.ConnectionParameter: matrixConnection}
	ids.prefix = "v:" + matrixConnection + "/"
	cfg.IDGen = ids
	return cfg
}

// startDemocratic runs democratic-csi's local-hostpath driver (controller
// and node) the way its CI does (ci/bin/launch-server.sh), with a base path
// in dir, and returns its socket.
func startDemocratic(t *testing.T, src, dir string) string {
	t.Helper()
	base := filepath.Join(dir, "democratic-base")
	conf := filepath.Join(dir, "democratic.yaml")
	// ci/configs/local-hostpath/basic.yaml
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`driver: local-hostpath
instance_id:
local-hostpath:
  shareBasePath: %[1]s
  controllerBasePath: %[1]s
  dirPermissionsMode: "0777"
  dirPermissionsUser: root
  dirPermissionsGroup: root
`, base)), 0o640); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "democratic", "csi.sock")
	if err := os.MkdirAll(filepath.Dir(sock), 0o750); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "democratic.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", filepath.Join(src, "bin", "democratic-csi"),
		"--log-level", "info", "--driver-config-file", conf, "--csi-version", "1.9.0",
		"--csi-name", "org.democratic-csi.local-hostpath", "--server-socket", sock)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CSI_NODE_ID=sanity-node")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopProcess(cmd)
		logFile.Close()
		if t.Failed() {
			out, _ := os.ReadFile(logFile.Name())
			t.Logf("democratic-csi log (end):\n%s", tail(out, 40))
		}
	})
	waitProbe(t, sock)
	return sock
}

// democraticIDs are volume IDs of democratic-csi's shape (its volume id
// is the volume's name) that name nothing.
type democraticIDs struct {
	sanity.DefaultIDGenerator
	prefix string
}

func (g democraticIDs) GenerateUniqueValidVolumeID() string {
	return g.prefix + "sanity-unknown-" + randomHex()
}

// democraticTables renders the two runs as the Markdown of
// docs/conformance.md.
func democraticTables(src string, direct, proxy *sanityResult, added int) string {
	var b strings.Builder
	version := "unknown version"
	if out, err := os.ReadFile(filepath.Join(src, "package.json")); err == nil {
		if i := strings.Index(string(out), `"version": "`); i >= 0 {
			version = strings.SplitN(string(out)[i+len(`"version": "`):], `"`, 2)[0]
		}
	}
	fmt.Fprintf(&b, "democratic-csi %s local-hostpath, csi-sanity %s, run %s\n\n", version, csiTestVersion, time.Now().UTC().Format("2006-01-02"))
	fmt.Fprintf(&b, "| run | passed | failed | skipped |\n|---|---|---|---|\n")
	fmt.Fprintf(&b, "| directly | %d | %d | %d |\n", direct.Passed, direct.Failed, direct.Skipped)
	fmt.Fprintf(&b, "| through the proxy | %d | %d | %d |\n\n", proxy.Passed, proxy.Failed, proxy.Skipped)
	fmt.Fprintf(&b, "Failures the proxy adds: %d.\n\n", added)
	for _, run := range []struct {
		name string
		r    *sanityResult
	}{{"directly", direct}, {"through the proxy", proxy}} {
		fmt.Fprintf(&b, "Failed %s:\n\n", run.name)
		if len(run.r.Failures) == 0 {
			b.WriteString("- none\n")
		}
		for _, spec := range sortedKeys(run.r.Failures) {
			fmt.Fprintf(&b, "- %s: %s\n", spec, firstLine(run.r.Failures[spec]))
		}
		b.WriteString("\n")
	}
	b.WriteString("Skipped in both runs by the test:\n\n")
	for _, s := range democraticSkips {
		fmt.Fprintf(&b, "- %s: %s\n", s.Spec, s.Reason)
	}
	return b.String()
}

// firstLine is the gist of a failure message: its first line that says
// something, with the gRPC error when there is one.
func firstLine(msg string) string {
	var first string
	for _, line := range strings.Split(msg, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "rpc error:") {
			return line
		}
		if first == "" && line != "" && line != "Unexpected error:" {
			first = line
		}
	}
	return first
}
