package kube

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	// skipReason is non-empty when the suite cannot run.
	skipReason string
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
	skipReason = findTools()
	if skipReason != "" {
		return m.Run()
	}
	bin, cleanup, err := testbin.Build(repoRoot, raceEnabled)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e/kube:", err)
		return 1
	}
	defer cleanup()
	binary = bin
	code := m.Run()
	stopCluster()
	return code
}

// findTools fills tools and says why the suite must skip, if it must.
func findTools() string {
	if os.Getenv(EnvEnable) == "" {
		return EnvEnable + " is not set: these tests start etcd and a kube-apiserver; run them with `make e2e-kube`"
	}
	for name := range tools {
		path := os.Getenv(name)
		if path == "" && name == "ETCD" {
			path, _ = exec.LookPath("etcd")
		}
		if path == "" {
			return name + " is not set (make e2e-kube sets it)"
		}
		if _, err := os.Stat(path); err != nil {
			return fmt.Sprintf("%s=%s: %v (make kube-tools and make csi-tools build it; etcd comes from the Debian package etcd-server)", name, path, err)
		}
		tools[name] = path
	}
	return ""
}

// need skips t when the suite cannot run.
func need(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}
