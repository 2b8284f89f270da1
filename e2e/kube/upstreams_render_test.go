package kube

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/democratic-csi/proxy-topology/internal/deploycheck"
	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/config"
)

// upstreamsValues is issue 29's values for two upstreams, verbatim: a
// generic CSI driver (nas1) and democratic-csi's local-hostpath through
// the democraticCsi preset (local).
const upstreamsValues = "e2e/kube/testdata/upstreams-values.yaml"

// rendered is one rendering of the chart: its objects by key, and the pod
// specs of its controller Deployment and node DaemonSet (nil when not
// rendered).
type rendered struct {
	objs       map[string]*unstructured.Unstructured
	list       []*unstructured.Unstructured
	ctrl, node *corev1.PodSpec
}

// renderChart renders the chart as release proxy-topology with helm
// flags.
func renderChart(t *testing.T, args ...string) *rendered {
	t.Helper()
	r := &rendered{list: helmTemplate(t, args...)}
	r.objs = byKey(r.list)
	for _, o := range r.list {
		var w struct {
			Spec struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}
		if o.GetKind() != "Deployment" && o.GetKind() != "DaemonSet" {
			continue
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &w); err != nil {
			t.Fatalf("%s: %v", key(o), err)
		}
		if o.GetKind() == "Deployment" {
			r.ctrl = &w.Spec.Template.Spec
		} else {
			r.node = &w.Spec.Template.Spec
		}
	}
	return r
}

// secretFile returns key of a rendered Secret, decoded.
func (r *rendered) secretFile(t *testing.T, name, file string) []byte {
	t.Helper()
	s, ok := r.objs["Secret/"+Namespace+"/"+name]
	if !ok {
		t.Fatalf("no Secret %s rendered", name)
	}
	data, _, _ := unstructured.NestedStringMap(s.Object, "data")
	b, err := base64.StdEncoding.DecodeString(data[file])
	if err != nil || data[file] == "" {
		t.Fatalf("Secret %s has no %s (%v): keys %v", name, file, err, keys(data))
	}
	return b
}

func podContainer(t *testing.T, spec *corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

// hostMounts returns the host paths a container mounts (hostPath
// volumes), by mount path.
func hostMounts(spec *corev1.PodSpec, c corev1.Container) map[string]string {
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	out := map[string]string{}
	for _, m := range c.VolumeMounts {
		if v := vols[m.Name]; v.HostPath != nil {
			out[m.MountPath] = v.HostPath.Path
		}
	}
	return out
}

func yamlEqual(t *testing.T, what string, want any, got []byte) {
	t.Helper()
	var g any
	if err := yaml.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, got)
	}
	w, _ := yaml.Marshal(want)
	var wv any
	_ = yaml.Unmarshal(w, &wv)
	if diff := cmp.Diff(wv, g); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

// TestUpstreamsRender (SPEC §14): issue 29's values render both upstreams
// into both pods, wired as deploycheck.UpstreamWiring says; nas1's
// containers run its image with its args per side, and its node side's
// hostNetwork makes the node pod (only) use the host's network; local
// runs democratic-csi's own container with the flags, socket, node id and
// host directory its chart gives local-hostpath; the driver config is the
// Secret mounted at /config; the connections Secret holds both
// connections with driver: csi and their sockets; and the API server
// accepts every object.
func TestUpstreamsRender(t *testing.T) {
	c := getCluster(t)
	c.ensureNamespace(t, Namespace)
	r := renderChart(t, "--values", upstreamsValues)
	c.dryRunAll(t, "issue 29's upstreams values", r.list)
	var values struct {
		Upstreams map[string]struct {
			Image         string         `json:"image"`
			Connection    map[string]any `json:"connection"`
			Controller    struct{ Args []string }
			Node          struct{ Args []string }
			DemocraticCsi struct {
				DriverConfig map[string]any `json:"driverConfig"`
			} `json:"democraticCsi"`
		} `json:"upstreams"`
	}
	readValues(t, upstreamsValues, &values)
	if r.ctrl == nil || r.node == nil {
		t.Fatal("no Deployment or DaemonSet rendered")
	}
	for _, name := range []string{"nas1", "local"} {
		for where, p := range map[string][]string{
			"controller": deploycheck.UpstreamWiring(*r.ctrl, name, false),
			"node":       deploycheck.UpstreamWiring(*r.node, name, true),
		} {
			for _, e := range p {
				t.Errorf("%s: %s", where, e)
			}
		}
		// The connection, from the entry's connection: key.
		want := values.Upstreams[name].Connection
		want["driver"] = "csi"
		want["csi"] = map[string]any{"endpoint": deploycheck.UpstreamEndpoint(name)}
		yamlEqual(t, "connection "+name, want, r.secretFile(t, "connections", name+".yaml"))
	}
	nas := values.Upstreams["nas1"]
	for _, side := range []struct {
		spec *corev1.PodSpec
		args []string
	}{{r.ctrl, nas.Controller.Args}, {r.node, nas.Node.Args}} {
		ctr := podContainer(t, side.spec, "upstream-nas1")
		if ctr.Image != nas.Image || !slices.Equal(ctr.Args, side.args) {
			t.Errorf("upstream-nas1 runs %s %v, want %s %v", ctr.Image, ctr.Args, nas.Image, side.args)
		}
	}
	if !r.node.HostNetwork || r.node.DNSPolicy != corev1.DNSClusterFirstWithHostNet || r.ctrl.HostNetwork {
		t.Errorf("hostNetwork: node pod %v (dnsPolicy %q), controller pod %v; want the node pod only", r.node.HostNetwork, r.node.DNSPolicy, r.ctrl.HostNetwork)
	}
	// nas1's connection loads with proxy-topology's own loader.
	if _, warnings, err := config.ParseConnection("nas1.yaml", r.secretFile(t, "connections", "nas1.yaml"), accessible.Options{}); err != nil || len(warnings) > 0 {
		t.Errorf("connection nas1: %v %q", err, warnings)
	}

	// local: democratic-csi's container, as its chart runs local-hostpath.
	for _, side := range []struct {
		spec *corev1.PodSpec
		mode string
	}{{r.ctrl, "controller"}, {r.node, "node"}} {
		ctr := podContainer(t, side.spec, "upstream-local")
		if !strings.HasPrefix(ctr.Image, "democraticcsi/democratic-csi:") {
			t.Errorf("upstream-local runs %s", ctr.Image)
		}
		for _, f := range []string{"--csi-mode=" + side.mode, "--server-socket=/csi/csi.sock", "--driver-config-file=/config/driver-config-file.yaml", "--csi-version=1.5.0", "--csi-name=org.democratic-csi.local"} {
			if !slices.Contains(ctr.Args, f) {
				t.Errorf("%s upstream-local: no %s in %v", side.mode, f, ctr.Args)
			}
		}
		var nodeID string
		for _, e := range ctr.Env {
			if e.Name == "CSI_NODE_ID" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				nodeID = e.ValueFrom.FieldRef.FieldPath
			}
		}
		if nodeID != "spec.nodeName" {
			t.Errorf("%s upstream-local: CSI_NODE_ID from %q, want spec.nodeName", side.mode, nodeID)
		}
		if got := hostMounts(side.spec, ctr)["/var/lib/csi-local-hostpath"]; got != "/var/lib/csi-local-hostpath" {
			t.Errorf("%s upstream-local: the host's /var/lib/csi-local-hostpath is not mounted there: %v", side.mode, hostMounts(side.spec, ctr))
		}
		var config bool
		for _, m := range ctr.VolumeMounts {
			config = config || m.Name == "upstream-local-config" && m.MountPath == "/config"
		}
		if !config {
			t.Errorf("%s upstream-local: the config Secret is not mounted at /config: %+v", side.mode, ctr.VolumeMounts)
		}
	}
	yamlEqual(t, "democratic-csi's driver config", values.Upstreams["local"].DemocraticCsi.DriverConfig,
		r.secretFile(t, "proxy-topology-upstream-local", "driver-config-file.yaml"))
}

// readValues reads a values file of the repository.
func readValues(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, path))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestUpstreamsRenderRules: the chart with issue 29's values passes helm
// lint --strict; a connection given in connections wins over the
// upstream's rendered one; in node-local mode the node pod's
// democratic-csi serves the controller service too; and values the chart
// cannot render are refused by helm template with a message naming the
// key.
func TestUpstreamsRenderRules(t *testing.T) {
	need(t)
	run(t, tools["HELM"], "lint", "--strict", "deploy/helm/proxy-topology", "--values", upstreamsValues)
	own := "driver: csi\ncsi:\n  endpoint: unix:///csi/upstreams/nas1/csi.sock\n  timeout: 30s\n"
	// connections.nas1 replaces the entry's connection block, which must
	// then be left out (TestHelmRefusesValues: both at once is refused).
	r := renderChart(t, "--values", upstreamsValues, "--set", "upstreams.nas1.connection=null", "--set-string", "connections.nas1="+own)
	if got := string(r.secretFile(t, "connections", "nas1.yaml")); got != own {
		t.Errorf("connections.nas1 is given, but the Secret holds:\n%s", got)
	}

	nl := renderChart(t, "--values", upstreamsValues, "--set", "nodeLocal.enabled=true", "--set", "controller.enabled=false")
	if nl.ctrl != nil {
		t.Error("node-local mode renders a Deployment")
	}
	args := podContainer(t, nl.node, "upstream-local").Args
	if !slices.Contains(args, "--csi-mode=node") || !slices.Contains(args, "--csi-mode=controller") {
		t.Errorf("node-local mode: the node pod's democratic-csi args %v, want --csi-mode=node and --csi-mode=controller", args)
	}

	for _, tc := range []struct {
		name string
		set  []string
		want string
	}{
		{"bad name", []string{"--set", "upstreams.Bad_Name.image=x"}, "upstreams.Bad_Name: the name must be"},
		{"no image", []string{"--set", "upstreams.x.controller.args={a}"}, "upstreams.x: no image"},
		{"no driver", []string{"--set", "upstreams.x.democraticCsi.driverConfig.instance_id=a"}, "upstreams.x.democraticCsi.driverConfig: no driver"},
		{"unknown driver", []string{"--set", "upstreams.x.democraticCsi.driverConfig.driver=nope"}, `"nope" is not a democratic-csi driver`},
		{"no CreateVolume", []string{"--set", "upstreams.x.democraticCsi.driverConfig.driver=zfs-local-ephemeral-inline"}, "zfs-local-ephemeral-inline cannot run behind a proxy"},
		{"other driver", []string{"--set", "upstreams.x.image=i", "--set", "upstreams.x.connection.driver=local-hostpath"}, "upstreams.x.connection.driver: local-hostpath"},
		{"other endpoint", []string{"--set", "upstreams.x.image=i", "--set", "upstreams.x.connection.csi.endpoint=unix:///x.sock"}, "upstreams.x.connection.csi.endpoint"},
	} {
		cmd := command(t, tools["HELM"], append([]string{"template", "proxy-topology", "deploy/helm/proxy-topology", "--namespace", Namespace}, tc.set...)...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s: helm template %v: %v, want an error with %q:\n%.600s", tc.name, tc.set, err, tc.want, out)
		}
	}
}

// docSection returns the text of docs/kubernetes.md from heading to the
// next heading of any level.
func docSection(t *testing.T, heading string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "kubernetes.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("docs/kubernetes.md has no %q", heading)
	}
	if i := strings.Index(rest, "\n#"); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

var backticked = regexp.MustCompile("`([^`]+)`")

// ticked returns the backticked words of s.
func ticked(s string) []string {
	var out []string
	for _, m := range backticked.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestUpstreamsPresetTable: every row of the democraticCsi preset's table
// in docs/kubernetes.md is what the chart renders. For each driver of a
// row, one upstream with that driver config is rendered: the host
// directories its node container mounts besides the kubelet directory and
// /dev, the node pod's host options, and its controller container's host
// directories and privilege are the row's; a refused row's drivers fail
// helm template.
func TestUpstreamsPresetTable(t *testing.T) {
	need(t)
	const base = "/var/lib/dcsi-local" // shareBasePath and controllerBasePath of local-hostpath
	rows := 0
	for _, line := range strings.Split(docSection(t, "### The `democraticCsi` preset"), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		cols := cells[1 : len(cells)-1]
		for i := range cols {
			cols[i] = strings.TrimSpace(cols[i])
		}
		if len(cols) != 4 {
			t.Fatalf("table row with %d columns: %s", len(cols), line)
		}
		rows++
		hostPaths := func(col string) []string {
			out := []string{}
			for _, w := range ticked(col) {
				switch {
				case strings.HasPrefix(w, "/"):
					out = append(out, w)
				case w == "shareBasePath" || w == "controllerBasePath":
					if !slices.Contains(out, base) {
						out = append(out, base)
					}
				}
			}
			slices.Sort(out)
			return out
		}
		nodeWant := hostPaths(cols[1])
		ctrlWant := hostPaths(cols[3])
		if strings.Contains(cols[3], "the same directories") {
			ctrlWant = nodeWant
		}
		var optsWant []string
		for _, o := range []string{"hostNetwork", "hostPID", "hostIPC"} {
			if strings.Contains(cols[2], o) {
				optsWant = append(optsWant, o)
			}
		}
		for _, driver := range ticked(cols[0]) {
			set := []string{"--set", "upstreams.x.democraticCsi.driverConfig.driver=" + driver,
				"--set", "upstreams.x.democraticCsi.driverConfig.local-hostpath.shareBasePath=" + base,
				"--set", "upstreams.x.democraticCsi.driverConfig.local-hostpath.controllerBasePath=" + base}
			if strings.HasPrefix(cols[1], "refused") {
				cmd := command(t, tools["HELM"], append([]string{"template", "proxy-topology", "deploy/helm/proxy-topology", "--namespace", Namespace}, set...)...)
				if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), driver+" cannot run behind a proxy") {
					t.Errorf("%s: the table says refused; helm template: %v\n%.400s", driver, err, out)
				}
				continue
			}
			r := renderChart(t, set...)
			got := func(spec *corev1.PodSpec, node bool) []string {
				out := []string{}
				for mp, hp := range hostMounts(spec, podContainer(t, spec, "upstream-x")) {
					if node && (mp == "/dev" || mp == "/var/lib/kubelet") {
						continue
					}
					if mp != hp && !(hp == "/" && mp == "/host") {
						t.Errorf("%s: host %s mounted at %s", driver, hp, mp)
					}
					out = append(out, mp)
				}
				slices.Sort(out)
				return out
			}
			if diff := cmp.Diff(nodeWant, got(r.node, true)); diff != "" {
				t.Errorf("%s: node container host mounts (-table +chart):\n%s", driver, diff)
			}
			if diff := cmp.Diff(ctrlWant, got(r.ctrl, false)); diff != "" {
				t.Errorf("%s: controller container host mounts (-table +chart):\n%s", driver, diff)
			}
			var opts []string
			for o, on := range map[string]bool{"hostNetwork": r.node.HostNetwork, "hostPID": r.node.HostPID, "hostIPC": r.node.HostIPC} {
				if on {
					opts = append(opts, o)
				}
			}
			slices.Sort(opts)
			slices.Sort(optsWant)
			if !slices.Equal(opts, optsWant) {
				t.Errorf("%s: node pod host options %v, the table says %v", driver, opts, optsWant)
			}
			sc := podContainer(t, r.ctrl, "upstream-x").SecurityContext
			privileged := sc != nil && sc.Privileged != nil && *sc.Privileged
			if want := strings.Contains(cols[3], "privileged"); privileged != want {
				t.Errorf("%s: controller container privileged %v, the table says %v", driver, privileged, want)
			}
		}
	}
	if rows < 8 {
		t.Errorf("the preset's table has %d rows", rows)
	}
}

// TestUpstreamsThreeSystems: the values of "Three storage systems, one
// release" in docs/kubernetes.md render the pods and containers the page
// counts: one controller pod and one node pod per node with the numbers
// of containers it gives, the node pod on the host network and IPC, a
// connection per storage system and a driver config Secret each; and the
// API server accepts every object.
func TestUpstreamsThreeSystems(t *testing.T) {
	c := getCluster(t)
	c.ensureNamespace(t, Namespace)
	section := docSection(t, "### Three storage systems, one release")
	_, rest, ok := strings.Cut(section, "```yaml\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("the section has no ```yaml block")
	}
	path := filepath.Join(t.TempDir(), "three.yaml")
	if err := os.WriteFile(path, []byte(block), 0o600); err != nil {
		t.Fatal(err)
	}
	r := renderChart(t, "--values", path)
	c.dryRunAll(t, "three storage systems", r.list)
	var workloads []string
	for _, o := range r.list {
		if k := o.GetKind(); k == "Deployment" || k == "DaemonSet" || k == "StatefulSet" {
			workloads = append(workloads, key(o))
		}
	}
	if len(workloads) != 2 {
		t.Errorf("workloads %v, want one Deployment and one DaemonSet", workloads)
	}
	m := regexp.MustCompile(`one controller pod with (\d+) containers[\s\S]*?one node pod per node with (\d+)`).FindStringSubmatch(section)
	if m == nil {
		t.Fatal("the section does not give the containers per pod")
	}
	for _, w := range []struct {
		what string
		spec *corev1.PodSpec
		doc  string
	}{{"controller", r.ctrl, m[1]}, {"node", r.node, m[2]}} {
		var names []string
		for _, ctr := range w.spec.Containers {
			names = append(names, ctr.Name)
		}
		if fmt.Sprint(len(names)) != w.doc {
			t.Errorf("the %s pod has %d containers %v; the page says %s", w.what, len(names), names, w.doc)
		}
	}
	if replicas, _, _ := unstructured.NestedFieldNoCopy(r.objs["Deployment/"+Namespace+"/proxy-topology-controller"].Object, "spec", "replicas"); fmt.Sprint(replicas) != "1" {
		t.Errorf("controller replicas %v", replicas)
	}
	if !r.node.HostNetwork || !r.node.HostIPC || r.ctrl.HostNetwork {
		t.Errorf("host options: node network %v IPC %v, controller network %v", r.node.HostNetwork, r.node.HostIPC, r.ctrl.HostNetwork)
	}
	for _, name := range []string{"nas-nfs", "nas-iscsi", "nas-nvme"} {
		r.secretFile(t, "connections", name+".yaml")
		r.secretFile(t, "proxy-topology-upstream-"+name, "driver-config-file.yaml")
	}
	t.Logf("three storage systems: 1 controller pod (%s containers), 1 node pod per node (%s containers)", m[1], m[2])
}

// TestUpstreamOverlayAccepted: `kustomize build deploy/upstream-nfs` (the
// overlay with one upstream wired in by hand) is accepted by the API
// server, and both pods wire the upstream as the chart does.
func TestUpstreamOverlayAccepted(t *testing.T) {
	c := getCluster(t)
	c.ensureNamespace(t, Namespace)
	objs := decodeObjects(t, run(t, tools["KUSTOMIZE"], "build", "deploy/upstream-nfs"))
	c.dryRunAll(t, "deploy/upstream-nfs", objs)
	n := 0
	for _, o := range objs {
		if o.GetKind() != "Deployment" && o.GetKind() != "DaemonSet" {
			continue
		}
		var w struct {
			Spec struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &w); err != nil {
			t.Fatal(err)
		}
		n++
		for _, p := range deploycheck.UpstreamWiring(w.Spec.Template.Spec, "nfs", o.GetKind() == "DaemonSet") {
			t.Errorf("%s: %s", key(o), p)
		}
	}
	if n != 2 {
		t.Errorf("deploy/upstream-nfs has %d workloads, want the Deployment and the DaemonSet", n)
	}
}
