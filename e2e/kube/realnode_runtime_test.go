package kube

import (
	"bytes"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// EnvNode asks for the TestRealNode tests (make e2e-node sets it).
const EnvNode = "PROXY_TOPOLOGY_E2E_NODE"

// nodeTools are the programs e2e-node runs, from the environment (make
// e2e-node) or PATH; all are required once EnvNode is set.
var nodeTools = map[string]string{}

// findNodeTools fills nodeTools and names everything missing: KUBELET,
// the images directory, containerd, runc, ctr, and the util-linux and
// iproute2 commands. Under make test this fails the suite, never skips it.
func findNodeTools() error {
	var missing []string
	for _, env := range []string{"KUBELET", "E2E_NODE_IMAGES", "E2E_IMAGE_PREFIX", "PROXY_IMAGE", "CSI_PROVISIONER_VERSION"} {
		v := os.Getenv(env)
		if v == "" {
			missing = append(missing, env+" is not set")
			continue
		}
		nodeTools[env] = v
	}
	for _, name := range []string{"containerd", "runc", "ctr", "ip", "nsenter", "unshare", "mount", "umount"} {
		p, err := exec.LookPath(name)
		if err != nil {
			missing = append(missing, name+" is not on PATH")
			continue
		}
		nodeTools[name] = p
	}
	// The real node-driver-registrar, when its binary was given (its image
	// is then in E2E_NODE_IMAGES); otherwise the test's stand-in.
	// Likewise livenessprobe, in both pods.
	for env, image := range map[string]string{"CSI_NODE_DRIVER_REGISTRAR": "csi-node-driver-registrar.tar", "CSI_LIVENESSPROBE": "livenessprobe.tar"} {
		if bin := os.Getenv(env); bin != "" {
			nodeTools[env] = bin
			nodeImages = append(nodeImages, image)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("e2e-node tools are missing: %s (make e2e-node builds kubelet and the images and installs containerd and runc from Debian when root)", strings.Join(missing, "; "))
	}
	if os.Getuid() != 0 {
		return errors.New("e2e-node needs root (namespaces, mounts, containerd)")
	}
	return nil
}

// nodeImages are the archives make node-images writes, imported into
// every node's containerd.
var nodeImages = []string{"pause.tar", "workload.tar", "proxy-topology.tar", "csi-provisioner.tar"}

func imageRef(name string) string {
	return nodeTools["E2E_IMAGE_PREFIX"] + "/" + name
}

// realNode is one node: its namespaces, containerd and kubelet.
type realNode struct {
	name, zone, ip string
	dir            string
	netns          *netNS
	mntns          *mountNS
	fwd            *forwarder
	containerd     *proc
	kubelet        *proc
	socket         string
	// registrationCalls are the node plugin's calls when kubelet had
	// registered it.
	registrationCalls map[string]int
	// madeDirs are directories of the machine made for the mount points
	// (removed at the end when still empty).
	madeDirs []string
}

// kubeletDir is the node's /var/lib/kubelet as the test process sees it.
func (n *realNode) kubeletDir() string { return filepath.Join(n.dir, "kubelet") }

// command runs name in the node's network and mount namespaces.
func (n *realNode) command(name string, args ...string) *exec.Cmd {
	return exec.Command(nodeTools["nsenter"], append([]string{"--net=" + n.netns.path, "--mount=" + n.mntns.file, "--", name}, args...)...)
}

// startProc starts cmd with its output in <dir>/<name>.log.
func (n *realNode) startProc(name string, cmd *exec.Cmd) (*proc, error) {
	logf, err := os.Create(filepath.Join(n.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("%s on %s: %w", name, n.name, err)
	}
	p := &proc{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.exited) }()
	return p, nil
}

func (n *realNode) log(name string) string { return tail(filepath.Join(n.dir, name+".log")) }

// fill renders an e2e/node template (containerd.toml, kubelet.yaml).
func fill(name, out string, data any) error {
	text, err := os.ReadFile(filepath.Join(repoRoot, "e2e", "node", name))
	if err != nil {
		return err
	}
	tmpl, err := template.New(name).Option("missingkey=error").Parse(string(text))
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, data); err != nil {
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o600)
}

// startRealNode brings up node i (1-based) of the cluster c in zone.
func startRealNode(c *cluster, i int, zone string) (n *realNode, err error) {
	n = &realNode{
		name: fmt.Sprintf("node-%s-a", zone), zone: zone,
		ip:  fmt.Sprintf("10.97.0.%d", 10+i),
		dir: filepath.Join(c.dir, "nodes", fmt.Sprintf("n%d", i)),
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, n.stop())
		}
	}()
	for _, d := range []string{"kubelet", "logs", "containerd/root", "containerd/state", "cni/bin", "cni/net.d"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
			return n, err
		}
	}
	// Mount points on the machine for the node's binds.
	for _, d := range []string{"/var/lib/kubelet", "/var/log/pods"} {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return n, err
			}
			n.madeDirs = append(n.madeDirs, d)
		}
	}
	if n.netns, err = newNetNS(fmt.Sprintf("pte2e-%d-%d", os.Getpid(), i), n.ip+"/32", "10.96.0.1/32"); err != nil {
		return n, err
	}
	if n.mntns, err = newMountNS(filepath.Join(n.dir, "mntns"), [][2]string{
		{"/var/lib/kubelet", n.kubeletDir()},
		{"/var/log/pods", filepath.Join(n.dir, "logs")},
	}); err != nil {
		return n, err
	}
	// The API server, at its 127.0.0.1 port for kubelet's kubeconfig and
	// at the kubernetes Service's 10.96.0.1:443 for the pods.
	apiHostPort := strings.TrimPrefix(c.url, "https://")
	if n.fwd, err = n.netns.forward(apiHostPort, apiHostPort, "10.96.0.1:443"); err != nil {
		return n, err
	}

	n.socket = filepath.Join(n.dir, "containerd", "containerd.sock")
	cfg := filepath.Join(n.dir, "containerd.toml")
	if err := fill("containerd.toml", cfg, map[string]string{
		"Dir": n.dir, "Socket": n.socket, "SandboxImage": imageRef("pause:1"),
	}); err != nil {
		return n, err
	}
	if n.containerd, err = n.startProc("containerd", n.command(nodeTools["containerd"], "--config", cfg)); err != nil {
		return n, err
	}
	if err := waitSocket(n.socket, n.containerd, 60*time.Second); err != nil {
		return n, fmt.Errorf("containerd on %s: %w\n%s", n.name, err, n.log("containerd"))
	}
	if err := n.importImages(); err != nil {
		return n, err
	}

	kc, err := n.kubeconfig(c, i)
	if err != nil {
		return n, err
	}
	kcfg := filepath.Join(n.dir, "kubelet.yaml")
	if err := fill("kubelet.yaml", kcfg, map[string]any{
		"CAFile": c.pki.caCert, "Port": 10250, "HealthzPort": 10248,
	}); err != nil {
		return n, err
	}
	if n.kubelet, err = n.startProc("kubelet", n.command(nodeTools["KUBELET"],
		"--config="+kcfg, "--kubeconfig="+kc,
		"--container-runtime-endpoint=unix://"+n.socket,
		"--hostname-override="+n.name, "--node-ip="+n.ip,
		"--root-dir=/var/lib/kubelet",
		"--v=3",
	)); err != nil {
		return n, err
	}
	return n, nil
}

// waitSocket waits for a unix socket to appear while p runs.
func waitSocket(path string, p *proc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			return fmt.Errorf("exited (%v) before %s appeared", p.cmd.ProcessState, path)
		default:
		}
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("no %s after %s", path, timeout)
}

// importImages imports the node-images archives into the CRI's
// namespace of the node's containerd (never pulled from a registry).
func (n *realNode) importImages() error {
	for _, img := range nodeImages {
		path := filepath.Join(nodeTools["E2E_NODE_IMAGES"], img)
		out, err := exec.Command(nodeTools["ctr"], "--address", n.socket, "-n", "k8s.io", "images", "import", path).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ctr images import %s on %s: %v: %s", path, n.name, err, out)
		}
	}
	return nil
}

// kubeconfig writes the node's kubeconfig with a client certificate for
// system:node:<name> in system:nodes (the Node authorizer's), signed by
// the suite's CA.
func (n *realNode) kubeconfig(c *cluster, i int) (string, error) {
	cert, key, err := c.pki.issue(int64(100+i), pkix.Name{CommonName: "system:node:" + n.name, Organization: []string{"system:nodes"}}, x509.ExtKeyUsageClientAuth, nil, nil)
	if err != nil {
		return "", err
	}
	path := filepath.Join(n.dir, "kubelet.kubeconfig")
	return path, c.writeKubeconfig(path, &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key})
}

// mountinfo is the node's mount table (its mount namespace's).
func (n *realNode) mountinfo() (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(n.kubelet.cmd.Process.Pid) + "/mountinfo")
	return string(b), err
}

// ctr runs ctr against the node's containerd in the CRI's namespace.
func (n *realNode) ctr(args ...string) (string, error) {
	out, err := exec.Command(nodeTools["ctr"], append([]string{"--address", n.socket, "-n", "k8s.io"}, args...)...).CombinedOutput()
	return string(out), err
}

// stop ends kubelet, every container of the node, containerd and the
// shims it started, then the namespaces (and with them every mount the
// node made), and the mount points it made on the machine.
func (n *realNode) stop() error {
	var errs []error
	stopProc := func(p *proc) {
		if p != nil {
			p.stop()
		}
	}
	stopProc(n.kubelet)
	if n.containerd != nil {
		select {
		case <-n.containerd.exited:
		default:
			if out, err := n.ctr("tasks", "ls", "-q"); err == nil {
				for _, id := range strings.Fields(out) {
					_, _ = n.ctr("tasks", "kill", "-a", "-s", "SIGKILL", id)
				}
				deadline := time.Now().Add(15 * time.Second)
				for _, id := range strings.Fields(out) {
					for time.Now().Before(deadline) {
						if _, err := n.ctr("tasks", "delete", "-f", id); err == nil {
							break
						}
						time.Sleep(200 * time.Millisecond)
					}
				}
			}
		}
		stopProc(n.containerd)
		if err := killShims(n.socket); err != nil {
			errs = append(errs, err)
		}
	}
	if n.fwd != nil {
		n.fwd.close()
	}
	if n.mntns != nil {
		if err := n.mntns.delete(); err != nil {
			errs = append(errs, err)
		}
	}
	if n.netns != nil {
		if err := n.netns.delete(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, d := range n.madeDirs {
		_ = os.Remove(d)
	}
	return errors.Join(errs...)
}

// killShims ends the containerd-shim-runc-v2 processes of the
// containerd at socket (found by their -address argument, never by name
// alone), which outlive containerd by design: a shim whose tasks were all
// deleted exits by itself within seconds; one still running after 5 s is
// killed and named on stderr.
func killShims(socket string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids, err := shimPids(socket)
		if err != nil || len(pids) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			fmt.Fprintf(os.Stderr, "e2e/kube: killed the shims %v of the containerd at %s\n", pids, socket)
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func shimPids(socket string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) == 0 || !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for j := 0; j+1 < len(args); j++ {
			if args[j] == "-address" && args[j+1] == socket {
				pids = append(pids, pid)
			}
		}
	}
	return pids, nil
}
