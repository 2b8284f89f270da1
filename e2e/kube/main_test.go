package kube

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/democratic-csi/proxy-topology/internal/testbin"
)

// EnvEnable must be set (by make e2e-kube) for any test here to run.
const EnvEnable = "PROXY_TOPOLOGY_E2E_KUBE"

var (
	// binary is the proxy-topology executable, built by TestMain.
	binary string
	// raceEnabled: the suite runs with -race, and so does the binary.
	raceEnabled = testbin.Race
	// repoRoot is the main module's directory.
	repoRoot string
	// skipReason is non-empty when the suite is not asked to run.
	skipReason string
	// realNodeSuite: make e2e-node asked for the TestRealNode tests
	// (EnvNode), which run real kubelets and containerd.
	realNodeSuite = os.Getenv(EnvNode) != ""
)

// tools are the external binaries, from env vars set by make e2e-kube.
var tools = map[string]string{
	"KUBE_APISERVER": "", "HELM": "", "KUSTOMIZE": "", "ETCD": "",
	"KUBE_SCHEDULER": "", "KUBE_CONTROLLER_MANAGER": "", "CSI_PROVISIONER": "", "CSI_RESIZER": "", "CSI_ATTACHER": "",
	"CSI_SNAPSHOTTER": "", "SNAPSHOT_CONTROLLER": "",
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	root, err := filepath.Abs("../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e/kube:", err)
		return 1
	}
	repoRoot = root
	if os.Getenv(EnvEnable) == "" {
		skipReason = EnvEnable + " is not set: these tests start etcd and a kube-apiserver; run them with `make e2e-kube`"
		return m.Run()
	}
	// Asked to run (make e2e-kube, CI): a missing tool is a failure, never
	// a silently skipped suite.
	if err := findTools(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e/kube: %s is set, but %v\n", EnvEnable, err)
		return 1
	}
	if realNodeSuite {
		if err := findNodeTools(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e/kube: %s is set, but %v\n", EnvNode, err)
			return 1
		}
	}
	bin, cleanup, err := testbin.Build(repoRoot, raceEnabled)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e/kube:", err)
		return 1
	}
	defer cleanup()
	binary = bin
	code := m.Run()
	if err := stopRealNodes(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e/kube: stopping the real nodes:", err)
		code = 1
	}
	stopCluster()
	if realNodeSuite {
		code = reportRealNodes(code)
	}
	return code
}

// findTools fills tools from the environment; it names every tool that
// is missing, not only the first.
func findTools() error {
	var missing []string
	for _, name := range slices.Sorted(maps.Keys(tools)) {
		path := os.Getenv(name)
		if path == "" && name == "ETCD" {
			path, _ = exec.LookPath("etcd")
		}
		if path == "" {
			missing = append(missing, name+" is not set")
			continue
		}
		if _, err := os.Stat(path); err != nil {
			missing = append(missing, fmt.Sprintf("%s=%s: %v", name, path, err))
			continue
		}
		tools[name] = path
	}
	if len(missing) > 0 {
		return fmt.Errorf("tools are missing: %s (make e2e-kube sets the variables; make kube-tools and make csi-tools build the binaries; etcd, looked up on PATH when ETCD is unset, comes from the Debian package etcd-server)", strings.Join(missing, "; "))
	}
	return nil
}

// need skips t when the suite is not asked to run (EnvEnable unset).
func need(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}
