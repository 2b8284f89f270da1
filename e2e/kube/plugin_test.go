package kube

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/democratic-csi/proxy-topology/internal/syncbuf"
)

// plugin is a running proxy-topology process.
type plugin struct {
	name     string
	cmd      *exec.Cmd
	endpoint string
	logs     *syncBuffer
	exited   chan struct{}
	conn     *grpc.ClientConn
}

type syncBuffer = syncbuf.Buffer

// startPlugin runs `proxy-topology serve` with args plus a socket of its
// own; env is added to the process environment.
func startPlugin(t *testing.T, name string, env []string, args ...string) *plugin {
	t.Helper()
	// Unix socket paths are limited to 108 bytes; t.TempDir is too long.
	dir, err := os.MkdirTemp("", "ptk-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := &plugin{name: name, endpoint: "unix://" + filepath.Join(dir, "csi.sock"), logs: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(binary, append([]string{"serve", "--csi-endpoint=" + p.endpoint, "--log-level=debug"}, args...)...)
	// Nothing from the test's environment leaks in (KUBECONFIG, a real
	// cluster's service host): only what the test passes.
	p.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}, env...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if p.conn != nil {
			p.conn.Close()
		}
		// However it ended (stopped or killed), the binary runs with
		// -race when the suite does.
		if strings.Contains(p.logs.String(), "WARNING: DATA RACE") {
			t.Errorf("%s: the race detector reported a data race; see its logs", name)
		}
		if t.Failed() {
			t.Logf("%s logs:\n%s", name, p.logs)
		}
	})
	return p
}

// ready waits until the plugin answers Probe as ready; it fails the test
// if the process exits first.
func (p *plugin) ready(t *testing.T) {
	t.Helper()
	conn, err := grpc.NewClient(p.endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	p.conn = conn
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-p.exited:
			t.Fatalf("%s exited (%v):\n%s", p.name, p.cmd.ProcessState, p.logs)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := csi.NewIdentityClient(conn).Probe(ctx, &csi.ProbeRequest{})
		cancel()
		if err == nil && resp.GetReady().GetValue() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after 60s: %v\n%s", p.name, err, p.logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// exit waits for the process to end and returns its exit code.
func (p *plugin) exit(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		t.Fatalf("%s still running after %s:\n%s", p.name, timeout, p.logs)
		return 0
	}
}

// deployedConfig writes the main config from deploy/kubernetes' ConfigMap,
// as the pods see it at /etc/proxy-topology/proxy.yaml, optionally edited.
func deployedConfig(t *testing.T, edit func(cfg map[string]any)) string {
	t.Helper()
	var cfg string
	for _, o := range kustomizeBuild(t) {
		if o.GetKind() == "ConfigMap" && o.GetName() == "proxy-topology-config" {
			cfg, _, _ = unstructured.NestedString(o.Object, "data", "proxy.yaml")
		}
	}
	if cfg == "" {
		t.Fatal("deploy/kubernetes has no ConfigMap proxy-topology-config with proxy.yaml")
	}
	if edit != nil {
		// Edited as data, never as text: a reformatted ConfigMap must not
		// make an edit silently miss.
		var doc map[string]any
		if err := yaml.Unmarshal([]byte(cfg), &doc); err != nil {
			t.Fatalf("proxy.yaml of proxy-topology-config: %v", err)
		}
		edit(doc)
		out, err := yaml.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		cfg = string(out)
	}
	path := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// containerEnv returns the literal env of a container of a workload in
// deploy/kubernetes, with $(VAR) references to the downward API resolved
// as kubelet would for a pod in Namespace.
func containerEnv(t *testing.T, workload, container string) []string {
	t.Helper()
	for _, o := range kustomizeBuild(t) {
		if o.GetName() != workload {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range cs {
			m := c.(map[string]any)
			if m["name"] != container {
				continue
			}
			vars := map[string]string{}
			var out []string
			envs, _ := m["env"].([]any)
			for _, e := range envs {
				em := e.(map[string]any)
				name := em["name"].(string)
				value, hasValue := em["value"].(string)
				if path, ok, _ := unstructured.NestedString(em, "valueFrom", "fieldRef", "fieldPath"); ok && path == "metadata.namespace" {
					value, hasValue = Namespace, true
				}
				if !hasValue {
					if _, isRef := em["valueFrom"]; isRef {
						continue
					}
				}
				for k, v := range vars {
					value = strings.ReplaceAll(value, "$("+k+")", v)
				}
				vars[name] = value
				out = append(out, name+"="+value)
			}
			return out
		}
	}
	t.Fatalf("deploy/kubernetes has no container %s in %s", container, workload)
	return nil
}
