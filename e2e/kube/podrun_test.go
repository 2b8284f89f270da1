package kube

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podRun plays kubelet's part for one Pod that the real controllers made
// from a deployed workload: it runs the pod's containers as processes on
// this machine with the args and env of the Pod object (the API server's
// copy, after defaulting), its volumes as directories (emptyDir, ConfigMap,
// Secret), and the pod's ServiceAccount as a kubeconfig. Nothing of the
// manifests is retyped here, so a flag or env var lost in rendering is lost
// in the test too.
type podRun struct {
	c       *cluster
	pod     *corev1.Pod
	volumes map[string]string // volume name -> host directory
	kubecfg string
}

// newPodRun prepares the volumes of pod. Pod Security and the
// ServiceAccount token are the API's; the token is requested for the
// pod's ServiceAccount.
func newPodRun(t *testing.T, c *cluster, pod *corev1.Pod) *podRun {
	t.Helper()
	r := &podRun{c: c, pod: pod, volumes: map[string]string{}}
	ctx := context.Background()
	// Unix socket paths are limited to 108 bytes; t.TempDir is too long.
	root, err := os.MkdirTemp("", "ptpod-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	for _, v := range pod.Spec.Volumes {
		dir := filepath.Join(root, v.Name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		files := map[string][]byte{}
		switch {
		case v.EmptyDir != nil:
		case v.HostPath != nil:
			// This pod's own directory stands for the node's: each fake
			// node has a host file system of its own.
		case v.ConfigMap != nil:
			cm, err := c.client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("pod %s volume %s: %v", pod.Name, v.Name, err)
			}
			for k, s := range cm.Data {
				files[k] = []byte(s)
			}
		case v.Secret != nil:
			sec, err := c.client.CoreV1().Secrets(pod.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err) && v.Secret.Optional != nil && *v.Secret.Optional:
				// kubelet mounts an empty directory.
			case err != nil:
				t.Fatalf("pod %s volume %s: %v", pod.Name, v.Name, err)
			default:
				files = sec.Data
			}
		case v.Projected != nil && strings.HasPrefix(v.Name, "kube-api-access-"):
			// The ServiceAccount token volume: replaced by --kubeconfig.
		default:
			t.Fatalf("pod %s: volume %s is of a kind this test does not provide", pod.Name, v.Name)
		}
		for k, data := range files {
			if err := os.WriteFile(filepath.Join(dir, k), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		r.volumes[v.Name] = dir
	}
	r.kubecfg = c.kubeconfig(t, c.token(t, pod.Namespace, pod.Spec.ServiceAccountName))
	return r
}

// container returns the named container of the pod.
func (r *podRun) container(t *testing.T, name string) *corev1.Container {
	t.Helper()
	for i := range r.pod.Spec.Containers {
		if r.pod.Spec.Containers[i].Name == name {
			return &r.pod.Spec.Containers[i]
		}
	}
	t.Fatalf("pod %s has no container %s", r.pod.Name, name)
	return nil
}

// env resolves a container's env as kubelet does: literal values with
// $(VAR) references to earlier variables, and the downward API fields a
// deployment of this driver uses. Any other source fails the test, so a
// new kind of env var is never silently dropped.
func (r *podRun) env(t *testing.T, ctr *corev1.Container) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom == nil:
			out[e.Name] = expand(e.Value, out)
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				out[e.Name] = r.pod.Name
			case "metadata.namespace":
				out[e.Name] = r.pod.Namespace
			case "spec.nodeName":
				out[e.Name] = r.pod.Spec.NodeName
			case "spec.serviceAccountName":
				out[e.Name] = r.pod.Spec.ServiceAccountName
			default:
				t.Fatalf("container %s: env %s: field %s is not provided by this test", ctr.Name, e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		default:
			t.Fatalf("container %s: env %s: this kind of valueFrom is not provided by this test", ctr.Name, e.Name)
		}
	}
	return out
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand replaces $(VAR) by its value as kubelet does; an unknown
// reference stays as written.
func expand(s string, vars map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := vars[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// args returns the container's command-line arguments with $(VAR)
// expanded and every path under a volume mount moved to the volume's
// host directory.
func (r *podRun) args(t *testing.T, ctr *corev1.Container) []string {
	t.Helper()
	env := r.env(t, ctr)
	var out []string
	for _, a := range append(append([]string(nil), ctr.Command...), ctr.Args...) {
		a = expand(a, env)
		for _, m := range ctr.VolumeMounts {
			dir, ok := r.volumes[m.Name]
			if !ok {
				t.Fatalf("container %s mounts unknown volume %s", ctr.Name, m.Name)
			}
			mp := strings.TrimSuffix(m.MountPath, "/")
			for _, p := range []string{"=" + mp + "/", "=unix://" + mp + "/", "=unix:" + mp + "/"} {
				if i := strings.Index(a, p); i >= 0 {
					a = a[:i] + strings.Replace(p, mp, dir, 1) + a[i+len(p):]
				}
			}
		}
		// The pod's own network namespace is this machine's: a listening
		// address on a port of the pod moves to a free loopback port.
		if m := listenArg.FindStringSubmatch(a); m != nil {
			port, err := freePort()
			if err != nil {
				t.Fatal(err)
			}
			a = fmt.Sprintf("%s127.0.0.1:%d", m[1], port)
		}
		out = append(out, a)
	}
	return out
}

var listenArg = regexp.MustCompile(`^(--[a-z-]*(?:address|endpoint)=)(?:0\.0\.0\.0)?:[0-9]+$`)

// envList is env as KEY=VALUE, plus PATH; nothing of the test's own
// environment leaks in.
func envList(env map[string]string) []string {
	out := []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// process is a started sidecar.
type process struct {
	name string
	// cmd is the process; for a container that restarts (startContainer),
	// the first run's until stop, then the last run's.
	cmd    *exec.Cmd
	logs   *syncBuffer
	exited chan struct{}

	// For a container that restarts: stopping ends the restarts, and
	// restarts counts them.
	stopping chan struct{}
	stopOnce sync.Once
	mu       sync.Mutex
	current  *exec.Cmd
	restarts atomic.Int32
}

// startProcess runs binary with args and env; it is stopped with SIGTERM
// when the test ends, and its logs are shown if the test failed.
func startProcess(t *testing.T, name, binary string, args, env []string) *process {
	t.Helper()
	p := &process{name: name, logs: &syncBuffer{}, exited: make(chan struct{})}
	cmd, done, err := runProcess(binary, args, env, p.logs)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	p.cmd = cmd
	go func() { <-done; close(p.exited) }()
	t.Cleanup(func() {
		terminate(p.cmd, p.exited)
		p.check(t)
	})
	return p
}

// containerRestartDelay is how long an exited container waits before it
// runs again. Kubelet's first back-off is 10s, doubling on every crash;
// the test does not wait that long, and restarts come seldom.
const containerRestartDelay = time.Second

// startContainer is startProcess for a container of a pod whose
// restartPolicy is Always (every Deployment's and DaemonSet's): when the
// process exits by itself it runs again, as kubelet would, with the same
// args, env and log, after containerRestartDelay. The kubernetes-csi
// sidecars exit when their connection to the driver drops, and rely on
// this to connect again. exited is closed only once stop has ended it.
func startContainer(t *testing.T, name, binary string, args, env []string) *process {
	t.Helper()
	p := &process{name: name, logs: &syncBuffer{}, exited: make(chan struct{}), stopping: make(chan struct{})}
	cmd, done, err := runProcess(binary, args, env, p.logs)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	p.cmd, p.current = cmd, cmd
	go func() {
		defer close(p.exited)
		for {
			select {
			case <-done:
			case <-p.stopping:
				cur := p.running()
				_ = cur.Process.Signal(syscall.SIGTERM)
				select {
				case <-done:
				case <-time.After(15 * time.Second):
					_ = cur.Process.Kill()
					<-done
				}
				p.mu.Lock()
				p.cmd = cur
				p.mu.Unlock()
				return
			}
			select {
			case <-p.stopping:
				return
			case <-time.After(containerRestartDelay):
			}
			fmt.Fprintf(p.logs, "=== %s exited (%v); restarted as kubelet would (restartPolicy: Always)\n", name, p.running().ProcessState)
			next, nextDone, err := runProcess(binary, args, env, p.logs)
			if err != nil {
				fmt.Fprintf(p.logs, "=== %s: restart failed: %v\n", name, err)
				return
			}
			p.restarts.Add(1)
			p.mu.Lock()
			p.current = next
			p.mu.Unlock()
			done = nextDone
		}
	}()
	t.Cleanup(func() {
		p.stop()
		if n := p.restarts.Load(); n > 0 {
			t.Logf("%s: restarts %d", name, n)
		}
		p.check(t)
	})
	return p
}

// running is the container's current run.
func (p *process) running() *exec.Cmd {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.current
}

// stop ends a container for good (SIGTERM, then SIGKILL after 15s) and
// waits for it; a process of startProcess is only waited for.
func (p *process) stop() {
	if p.stopping != nil {
		p.stopOnce.Do(func() { close(p.stopping) })
	}
	<-p.exited
}

// runProcess starts binary; done is closed once it has exited.
func runProcess(binary string, args, env []string, logs *syncBuffer) (*exec.Cmd, chan struct{}, error) {
	cmd := exec.Command(binary, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	return cmd, done, nil
}

// check reports what the logs of an ended process show: a data race
// (proxy-topology runs with -race when the suite does) or a call the
// deployed RBAC denied; and shows the logs if the test failed.
func (p *process) check(t *testing.T) {
	if strings.Contains(p.logs.String(), "WARNING: DATA RACE") {
		t.Errorf("%s: the race detector reported a data race; see its logs", p.name)
	}
	// The deployed RBAC lets each container do all it tries.
	for _, line := range strings.Split(p.logs.String(), "\n") {
		if strings.Contains(line, "is forbidden") {
			t.Errorf("%s: denied by RBAC: %s", p.name, line)
		}
	}
	if t.Failed() {
		t.Logf("%s logs:\n%s", p.name, p.logs)
	}
}

// alive fails the test if the process has exited.
func (p *process) alive(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
		t.Fatalf("%s exited (%v):\n%s", p.name, p.cmd.ProcessState, p.logs)
	default:
	}
}

// waitPod waits for the single Pod of a workload selected by labels to
// exist and be scheduled, and returns it.
func waitPod(t *testing.T, c *cluster, namespace, selector string) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		list, err := c.client.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) == 1 && list.Items[0].Spec.NodeName != "" {
			return &list.Items[0]
		}
		if time.Now().After(deadline) {
			var state []string
			for _, p := range list.Items {
				state = append(state, fmt.Sprintf("%s node=%q conditions=%v", p.Name, p.Spec.NodeName, p.Status.Conditions))
			}
			t.Fatalf("no single scheduled pod %s in %s after 90s: %v\nkube-controller-manager:\n%s\nkube-scheduler:\n%s", selector, namespace, state,
				tail(filepath.Join(c.dir, "kube-controller-manager.log")), tail(filepath.Join(c.dir, "kube-scheduler.log")))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// csiRoot is where the containers of a pod with upstream drivers (SPEC
// §14) find the upstreams' sockets: /csi in the upstream's container,
// /csi/upstreams/<name> in proxy-topology's. Those paths are read from
// connection files, not from args, so args cannot move them; a container
// that mounts volumes there runs in a mount namespace of its own
// (inMountNamespace) in which they are bind-mounted where the pod puts
// them.
const csiRoot = "/csi"

// inMountNamespace returns the command line that runs binary with args
// in a mount namespace of its own (unshare; host mounts propagate in,
// nothing propagates out) where every volume the container mounts at or
// under csiRoot is bind-mounted at its mount path, on a tmpfs at csiRoot.
// A container with no such mount runs as it is. csiRoot is made on this
// machine, empty, as the mount point (and removed when the test ends if
// it was made here). Mounts the process makes stay in its namespace: this
// is for proxy-topology's container, which reaches sockets there, not for
// an upstream's node container, whose mounts kubelet must see.
func (r *podRun) inMountNamespace(t *testing.T, ctr *corev1.Container, binary string, args []string) (string, []string) {
	t.Helper()
	var script []string
	for _, m := range ctr.VolumeMounts {
		mp := strings.TrimSuffix(m.MountPath, "/")
		if mp != csiRoot && !strings.HasPrefix(mp, csiRoot+"/") {
			continue
		}
		script = append(script, fmt.Sprintf("mkdir -p '%s' && mount --bind '%s' '%s'", mp, r.volumes[m.Name], mp))
	}
	if len(script) == 0 {
		return binary, args
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatalf("container %s mounts volumes under %s, which it reads from files: running it needs unshare (util-linux) and root: %v", ctr.Name, csiRoot, err)
	}
	if err := os.Mkdir(csiRoot, 0o755); err == nil {
		t.Cleanup(func() { _ = os.Remove(csiRoot) })
	} else if !os.IsExist(err) {
		t.Fatalf("the mount point %s: %v", csiRoot, err)
	}
	script = append([]string{"set -e", "mount -t tmpfs -o mode=0755 csi " + csiRoot}, script...)
	script = append(script, `exec "$0" "$@"`)
	return "unshare", append([]string{"--mount", "--propagation", "slave", "--", "sh", "-c", strings.Join(script, "\n"), binary}, args...)
}
