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

// democraticSkips apply to both runs. Only what the direct run needs is
// skipped: a spec whose failure breaks the specs after it. Every other
// spec runs, and the proxy must fail no spec the driver alone passes.
var democraticSkips = []SkipSpec{
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
// "proxy" the proxy in front of it, and returns the suite's
// configuration. The proxy runs as a user would run it: the connection
// file is the one the docs give (examples/connections/
// democratic-csi-local.yaml, its endpoint pointed at the driver's
// socket), the main config names the folder and nothing else, and
// csi-sanity's requests reach the proxy untouched. The connection is
// named as a StorageClass names it, in the volume parameters csi-sanity
// sends (its --csi.testvolumeparameters).
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
	example, err := os.ReadFile(filepath.Join("..", "..", democraticExample))
	if err != nil {
		t.Fatal(err)
	}
	conn := strings.Replace(string(example), democraticExampleEndpoint, "unix://"+sock, 1)
	if conn == string(example) {
		t.Fatalf("%s does not name the endpoint %s any more: update the test", democraticExample, democraticExampleEndpoint)
	}
	if err := os.WriteFile(filepath.Join(folder, matrixConnection+".yaml"), []byte(conn), 0o640); err != nil {
		t.Fatal(err)
	}
	mainCfg := filepath.Join(dir, "proxy.yaml")
	if err := os.WriteFile(mainCfg, []byte(fmt.Sprintf(
		"driver: proxy\ncsiName: org.democratic-csi.proxy-topology\nproxy:\n  configFolder: %s\n", folder)), 0o640); err != nil {
		t.Fatal(err)
	}
	proxySock := filepath.Join(dir, "proxy", "csi.sock")
	// The proxy and democratic-csi get the same node id (sanity-node), as
	// two containers of one pod both get the node name.
	startServe(t, os.Getenv(democraticBinEnv), dir, mainCfg, proxySock)
	cfg.Address = "unix://" + proxySock
	cfg.TestVolumeParameters = map[string]string{pcsi.ConnectionParameter: matrixConnection}
	ids.prefix = "v:" + matrixConnection + "/"
	cfg.IDGen = ids
	return cfg
}

// democraticExample is the connection file the docs give for
// democratic-csi's local-hostpath, and democraticExampleEndpoint the
// endpoint it names.
const (
	democraticExample         = "examples/connections/democratic-csi-local.yaml"
	democraticExampleEndpoint = "unix:///csi/upstreams/democratic-csi-local/csi.sock"
)

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
