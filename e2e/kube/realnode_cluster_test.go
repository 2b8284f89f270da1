package kube

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"sigs.k8s.io/yaml"
)

// The e2e-node cluster: the e2e-kube control plane (etcd, kube-apiserver,
// kube-scheduler, kube-controller-manager), realNodeZones real nodes, and
// the chart installed with helm into rnNamespace, its controller and node
// pods run by kubelet as containers.
const (
	rnNamespace = "e2e-realnode"
	rnRelease   = "rn"
	rnDriver    = "node.e2e.proxy-topology"
	rnPrefix    = "org.democratic-csi.topology"
	rnZoneKey   = rnPrefix + "/zone"
	// The node plugin's and the controller's metrics ports, apart: with
	// hostNetwork the controller pod shares a node's network namespace
	// with that node's plugin.
	rnNodeMetrics       = 9809
	rnControllerMetrics = 9819
	// The livenessprobe sidecars' ports, apart for the same reason.
	rnNodeLiveness       = 9808
	rnControllerLiveness = 9818
)

var realNodeZones = []string{"z1", "z2"}

type realNodes struct {
	c       *cluster
	nodes   []*realNode
	storage string
	regs    []*grpc.Server
	// driverRegistrar: the real node-driver-registrar runs in the node
	// pods; otherwise the test serves the registration socket (regs).
	driverRegistrar bool
	// cgroups are the k8s.io cgroups that existed before the nodes.
	cgroups []string
}

var (
	realNodesOnce sync.Once
	realNodesErr  error
	rn            *realNodes
	// rnPassed, rnFailed count the TestRealNode tests for the summary.
	rnPassed, rnFailed atomic.Int32
)

// withRealNodes starts the e2e-node cluster once and counts t in the
// summary line.
func withRealNodes(t *testing.T) *realNodes {
	t.Helper()
	if !realNodeSuite {
		t.Skip(EnvNode + " is not set: these tests run real kubelets and containerd as root; run them with `make e2e-node`")
	}
	c := getCluster(t)
	c.controlPlane(t)
	t.Cleanup(func() {
		if t.Failed() {
			rnFailed.Add(1)
		} else {
			rnPassed.Add(1)
		}
	})
	realNodesOnce.Do(func() {
		start := time.Now()
		rn, realNodesErr = startRealNodes(c)
		if realNodesErr == nil {
			reg := "the test's stand-in for node-driver-registrar (no CSI_NODE_DRIVER_REGISTRAR binary)"
			if rn.driverRegistrar {
				reg = "node-driver-registrar " + toolVersion(nodeTools["CSI_NODE_DRIVER_REGISTRAR"]) + " in the node pods"
			}
			live := "no livenessprobe (no CSI_LIVENESSPROBE binary)"
			if bin := nodeTools["CSI_LIVENESSPROBE"]; bin != "" {
				live = "livenessprobe " + toolVersion(bin) + " in both pods"
			}
			fmt.Fprintf(os.Stderr, "e2e/kube: %d real nodes and the chart ready in %s; plugin registration by %s; %s\n", len(rn.nodes), time.Since(start).Round(time.Millisecond), reg, live)
		}
	})
	if realNodesErr != nil {
		t.Fatal(realNodesErr)
	}
	return rn
}

func startRealNodes(c *cluster) (r *realNodes, err error) {
	r = &realNodes{c: c, storage: filepath.Join(c.dir, "storage"), driverRegistrar: nodeTools["CSI_NODE_DRIVER_REGISTRAR"] != ""}
	rn = r
	// containerd (runc) makes /k8s.io in every cgroup hierarchy; those it
	// makes here are removed at the end.
	r.cgroups, _ = filepath.Glob("/sys/fs/cgroup/*/k8s.io")
	for _, d := range []string{"z1", "z2", "any", "up1"} {
		if err := os.MkdirAll(filepath.Join(r.storage, d), 0o755); err != nil {
			return r, err
		}
	}
	type result struct {
		n   *realNode
		err error
	}
	results := make([]result, len(realNodeZones))
	var wg sync.WaitGroup
	for i, zone := range realNodeZones {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := startRealNode(c, i+1, zone)
			results[i] = result{n, err}
		}()
	}
	wg.Wait()
	var errs []error
	for _, res := range results {
		if res.err != nil {
			errs = append(errs, res.err)
			continue
		}
		r.nodes = append(r.nodes, res.n)
	}
	if err := errors.Join(errs...); err != nil {
		return r, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, n := range r.nodes {
		if err := r.waitNode(ctx, n); err != nil {
			return r, err
		}
	}
	if err := r.installChart(ctx); err != nil {
		return r, err
	}
	for _, n := range r.nodes {
		if err := r.register(ctx, n); err != nil {
			return r, err
		}
	}
	return r, nil
}

// waitNode waits for kubelet to have registered its Node.
func (r *realNodes) waitNode(ctx context.Context, n *realNode) error {
	for {
		if _, err := r.c.client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{}); err == nil {
			return nil
		}
		select {
		case <-n.kubelet.exited:
			return fmt.Errorf("kubelet on %s exited (%v):\n%s", n.name, n.kubelet.cmd.ProcessState, n.log("kubelet"))
		case <-ctx.Done():
			return fmt.Errorf("kubelet on %s registered no Node: %w\n%s", n.name, ctx.Err(), n.log("kubelet"))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// values are the chart values e2e-node installs with: the images built
// here (never pulled), hostNetwork pods (there is no pod network) that
// tolerate the NotReady nodes, zones from node names by fromRegexp, and
// local-hostpath connections per zone, without a zone, and a group.
func (r *realNodes) values() map[string]any {
	repo, tag, _ := strings.Cut(nodeTools["PROXY_IMAGE"], ":")
	tolerate := []any{map[string]any{"operator": "Exists"}}
	// Every node's storage directory is on the one machine: each
	// connection says where it is reachable (a zone, or the whole
	// cluster: without topology a local-hostpath connection would be
	// node-local, SPEC §12).
	hostpath := func(dir string, key, value string) map[string]any {
		return map[string]any{
			// stage: kubelet stages (NodeStageVolume) before it publishes.
			"driver": "local-hostpath", "local-hostpath": map[string]any{"shareBasePath": filepath.Join(r.storage, dir), "stage": true},
			"proxy": map[string]any{"perDriver": map[string]any{"topology": []any{map[string]any{"requirements": map[string]any{key: value}}}}},
		}
	}
	class := func(name, conn, mode string) map[string]any {
		return map[string]any{"name": name, "reclaimPolicy": "Delete", "volumeBindingMode": mode, "parameters": map[string]any{"connection": conn}}
	}
	allowed := class("rn-allowed", "hp-z2", "Immediate")
	allowed["allowedTopologies"] = []any{map[string]any{"matchLabelExpressions": []any{map[string]any{"key": rnZoneKey, "values": []any{"z2"}}}}}
	return map[string]any{
		"csiDriver": map[string]any{"name": rnDriver},
		"image":     map[string]any{"repository": repo, "tag": tag, "pullPolicy": "Never"},
		"config": map[string]any{"proxy": map[string]any{"nodeTopology": map[string]any{
			"type": "cluster", "prefix": rnPrefix,
			"fromRegexp": []any{map[string]any{"topologyKey": "zone", "source": "nodeName", "regex": "node-(z[0-9]+)-.*", "template": "{match:1}"}},
		}}},
		"rbac":      map[string]any{"nodeLabels": false},
		"hostPaths": []any{map[string]any{"name": "storage", "path": r.storage}},
		"connections": map[string]any{
			"hp-z1": hostpath("z1", "zone", "z1"), "hp-z2": hostpath("z2", "zone", "z2"), "hp-any": hostpath("any", "cluster", "local"),
			"hp-group": map[string]any{"driver": "group", "group": map[string]any{"members": []any{"hp-z1", "hp-z2"}}},
		},
		"controller": map[string]any{
			"hostNetwork": true, "tolerations": tolerate,
			"driver":              map[string]any{"metricsPort": rnControllerMetrics},
			"livenessProbe":       livenessValues(rnControllerLiveness),
			"externalProvisioner": map[string]any{"image": imageRef("csi-provisioner:" + nodeTools["CSI_PROVISIONER_VERSION"])},
			"externalResizer":     map[string]any{"enabled": false},
			"externalSnapshotter": map[string]any{"enabled": false},
		},
		"node": map[string]any{
			"hostNetwork": true, "tolerations": tolerate,
			"driver":          map[string]any{"metricsPort": rnNodeMetrics},
			"driverRegistrar": r.registrarValues(),
			"livenessProbe":   livenessValues(rnNodeLiveness),
		},
		"upstreams": map[string]any{"up1": r.upstream()},
		"storageClasses": []any{
			class("rn-upstream", "up1", "Immediate"),
			class("rn-immediate", "hp-any", "Immediate"),
			allowed,
			class("rn-first-consumer", "hp-z1", "WaitForFirstConsumer"),
			class("rn-group", "hp-group", "WaitForFirstConsumer"),
		},
		"volumeSnapshotClasses": []any{},
	}
}

// registrarValues: the real node-driver-registrar from the image of the
// binary given (make node-images), or none and the test's stand-in.
func (r *realNodes) registrarValues() map[string]any {
	if !r.driverRegistrar {
		return map[string]any{"enabled": false}
	}
	return map[string]any{"enabled": true, "image": imageRef("csi-node-driver-registrar:" + toolVersion(nodeTools["CSI_NODE_DRIVER_REGISTRAR"]))}
}

// livenessValues: the livenessprobe sidecar (and the proxy container's
// livenessProbe on it) from the image of the binary given, or neither.
func livenessValues(port int) map[string]any {
	bin := nodeTools["CSI_LIVENESSPROBE"]
	if bin == "" {
		return map[string]any{"enabled": false}
	}
	return map[string]any{"enabled": true, "port": port, "image": imageRef("livenessprobe:" + toolVersion(bin))}
}

// installChart runs helm install as a user would, and waits for the
// controller pod and a node pod per node to run.
func (r *realNodes) installChart(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rnNamespace, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}
	if _, err := r.c.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	vals, err := yaml.Marshal(r.values())
	if err != nil {
		return err
	}
	dir := filepath.Join(r.c.dir, "helm")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	valuesFile := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(valuesFile, vals, 0o600); err != nil {
		return err
	}
	kc := filepath.Join(dir, "kubeconfig")
	if err := r.c.writeKubeconfigAdmin(kc); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, tools["HELM"], "install", rnRelease, "deploy/helm/proxy-topology",
		"--namespace", rnNamespace, "--kubeconfig", kc, "--values", valuesFile)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CACHE_HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("helm install: %v\n%s", err, out)
	}
	want := len(r.nodes) + 1
	for {
		pods, err := r.c.client.CoreV1().Pods(rnNamespace).List(ctx, metav1.ListOptions{})
		running, state := 0, ""
		if err == nil {
			for _, p := range pods.Items {
				if podRunning(&p) {
					running++
				}
				state += fmt.Sprintf("\n%s on %q: %s", p.Name, p.Spec.NodeName, podState(&p))
			}
		}
		if running == want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the chart's pods: %d of %d running: %v%s\n%s", running, want, err, state, r.nodes[0].log("kubelet"))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func podRunning(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running == nil {
			return false
		}
	}
	return len(p.Status.ContainerStatuses) > 0
}

// podState is a pod's phase and its containers' states, for messages.
func podState(p *corev1.Pod) string {
	s := string(p.Status.Phase)
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			s += fmt.Sprintf(" [%s: %s]", c.Type, c.Message)
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		switch {
		case cs.State.Running != nil:
			s += fmt.Sprintf(" %s=running(restarts %d)", cs.Name, cs.RestartCount)
		case cs.State.Waiting != nil:
			s += fmt.Sprintf(" %s=waiting(%s: %s)", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)
		case cs.State.Terminated != nil:
			s += fmt.Sprintf(" %s=terminated(%s, %d: %s)", cs.Name, cs.State.Terminated.Reason, cs.State.Terminated.ExitCode, cs.State.Terminated.Message)
		}
	}
	return s
}

// writeKubeconfigAdmin writes the admin's kubeconfig to path (for helm).
func (c *cluster) writeKubeconfigAdmin(path string) error {
	return c.writeKubeconfig(path, &clientcmdapi.AuthInfo{ClientCertificateData: c.pki.adminCertPEM, ClientKeyData: c.pki.adminKeyPEM})
}

// register makes kubelet register the driver on n. The chart's
// node-driver-registrar does when its image was built (its binary given);
// its module is not served by the Go module proxy this machine reaches,
// so without its binary the test serves the
// kubelet plugin-registration socket itself, answering GetInfo as the
// registrar does (type CSIPlugin, the driver's name, the node pod's
// socket as kubelet sees it). Everything after, NodeGetInfo, the Node
// labels and CSINode, is kubelet's. It returns when CSINode lists the
// driver and the Node carries its zone label.
func (r *realNodes) register(ctx context.Context, n *realNode) error {
	sock := filepath.Join(n.kubeletDir(), "plugins", rnDriver, "csi.sock")
	if err := waitSocket(sock, n.kubelet, time.Minute); err != nil {
		return fmt.Errorf("the node plugin's socket on %s: %w", n.name, err)
	}
	if !r.driverRegistrar {
		srv, err := serveRegistration(n, "/var/lib/kubelet/plugins/"+rnDriver+"/csi.sock")
		if err != nil {
			return err
		}
		r.regs = append(r.regs, srv)
	}
	for {
		cn, err := r.c.client.StorageV1().CSINodes().Get(ctx, n.name, metav1.GetOptions{})
		if err == nil && slices.ContainsFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == rnDriver }) {
			node, err := r.c.client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
			if err == nil && node.Labels[rnZoneKey] != "" {
				// The node plugin's calls at registration, for
				// TestRealNodeLabels (a later restart resets them).
				n.registrationCalls, err = n.metrics(ctx)
				return err
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubelet on %s did not register %s in CSINode: %v\n%s", n.name, rnDriver, err, n.log("kubelet"))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// registration is the stand-in for node-driver-registrar's socket.
type registration struct {
	registerapi.UnimplementedRegistrationServer
	endpoint string
	status   chan *registerapi.RegistrationStatus
}

func (s *registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: rnDriver, Endpoint: s.endpoint, SupportedVersions: []string{"1.0.0"}}, nil
}

func (s *registration) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	select {
	case s.status <- st:
	default:
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

func serveRegistration(n *realNode, endpoint string) (*grpc.Server, error) {
	path := filepath.Join(n.kubeletDir(), "plugins_registry", rnDriver+"-reg.sock")
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, &registration{endpoint: endpoint, status: make(chan *registerapi.RegistrationStatus, 8)})
	go func() { _ = srv.Serve(l) }()
	return srv, nil
}

// metrics reads the proxy_topology_csi_requests_total counters of the
// node plugin on n (through n's network namespace), by method and
// connection, OK calls only.
func (n *realNode) metrics(ctx context.Context) (map[string]int, error) {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: n.netns.dial}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(n.ip, strconv.Itoa(rnNodeMetrics))+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return parseCalls(body), nil
}

// parseCalls turns the proxy's call counters into counts of OK calls:
// csi_requests_total (calls the proxy served) as "Method connection",
// upstream_requests_total (calls it made to an upstream) as
// "upstream Method connection".
func parseCalls(body []byte) map[string]int {
	out := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		var kind string
		switch {
		case strings.HasPrefix(line, "proxy_topology_csi_requests_total{"):
		case strings.HasPrefix(line, "proxy_topology_upstream_requests_total{"):
			kind = "upstream "
		default:
			continue
		}
		_, rest, _ := strings.Cut(line, "{")
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		l := map[string]string{}
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			l[k] = strings.Trim(v, `"`)
		}
		if l["code"] != "OK" {
			continue
		}
		f, _ := strconv.ParseFloat(value, 64)
		method := l["method"]
		if i := strings.LastIndex(method, "/"); i >= 0 {
			method = method[i+1:]
		}
		out[kind+method+" "+l["connection"]] += int(f)
	}
	return out
}

// stopRealNodes stops every node and the registration stand-ins.
func stopRealNodes() error {
	if rn == nil {
		return nil
	}
	for _, s := range rn.regs {
		s.Stop()
	}
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range rn.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.stop(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := removeCgroups(rn.cgroups); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// removeCgroups removes the k8s.io cgroup directories the nodes' runc
// made (not those in existed): empty by now, deepest first.
func removeCgroups(existed []string) error {
	made, _ := filepath.Glob("/sys/fs/cgroup/*/k8s.io")
	var errs []error
	for _, top := range made {
		if slices.Contains(existed, top) {
			continue
		}
		var dirs []string
		_ = filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// reportRealNodes prints make e2e-node's summary line.
func reportRealNodes(code int) int {
	version := "unknown"
	if out, err := exec.Command("containerd", "--version").Output(); err == nil {
		if f := strings.Fields(string(out)); len(f) >= 3 {
			version = f[2]
		}
	}
	passed, failed := rnPassed.Load(), rnFailed.Load()
	if code != 0 && failed == 0 {
		failed = 1 // the suite failed outside a test (start-up or clean-up)
	}
	line := fmt.Sprintf("e2e-node: %d nodes (kubelet %s, containerd %s): %d passed, %d failed\n", len(realNodeZones), toolVersion(nodeTools["KUBELET"]), version, passed, failed)
	// go test shows a passing package's output only with -v: make
	// e2e-node prints this file after it.
	if path := os.Getenv("E2E_NODE_REPORT"); path == "" || os.WriteFile(path, []byte(line), 0o644) != nil {
		fmt.Print(line)
	}
	if failed > 0 && code == 0 {
		return 1
	}
	return code
}
