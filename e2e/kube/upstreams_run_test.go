package kube

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/democratic-csi/proxy-topology/internal/deploycheck"
	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/config"
)

// The chart's upstreams run (SPEC §14): issue 29's two upstreams, a
// generic CSI driver and democratic-csi's local-hostpath through the
// democraticCsi preset, in a release of their own.
const (
	upsNamespace = "e2e-upstreams"
	upsRelease   = "ups"
	upsDriver    = "upstreams.e2e.proxy-topology"
	upsNode      = "ups-node"
	// The second release, in node-local mode, for democratic-csi's
	// node-local local-hostpath.
	upsNLRelease   = "upsnl"
	upsNLNamespace = "e2e-upstreams-nl"
	upsNLDriver    = "upstreams-nl.e2e.proxy-topology"
	// genericImage stands for any CSI driver's image; its containers run
	// proxy-topology's own standalone local-hostpath driver.
	genericImage = "example.com/generic-csi:v1"
	// dcsiImage is democratic-csi's image; its containers run
	// `node $DEMOCRATIC_CSI/bin/democratic-csi`.
	dcsiImage = "democraticcsi/democratic-csi:"
	// democraticEnv names a democratic-csi source tree with its
	// node_modules (make interop's DEMOCRATIC_CSI).
	democraticEnv = "DEMOCRATIC_CSI"
)

// upsValues are the test's values: issue 29's shape, with what this
// machine can run. generic's image runs proxy-topology's standalone
// local-hostpath on genericData (its config a file of the entry, its data
// a host directory mounted at the same path on both sides, its node side
// on the host network as nas1's); local is the democratic-csi
// local-hostpath on dcsiData. The controller pod is pinned to the test's
// one node.
func upsValues(genericData, dcsiData string) map[string]any {
	serve := func(mode string, extra ...string) []any {
		args := []any{"serve", "--mode=" + mode, "--config=/config/driver.yaml", "--csi-endpoint=$(CSI_ENDPOINT)", "--log-level=debug"}
		for _, e := range extra {
			args = append(args, e)
		}
		return args
	}
	class := func(name string) map[string]any {
		return map[string]any{"name": "ups-" + name, "volumeBindingMode": "WaitForFirstConsumer", "reclaimPolicy": "Delete",
			"parameters": map[string]any{"connection": name}}
	}
	return map[string]any{
		"csiDriver": map[string]any{"name": upsDriver, "storageCapacity": false},
		"controller": map[string]any{
			"nodeSelector":        map[string]any{"kubernetes.io/os": "linux", "kubernetes.io/hostname": upsNode},
			"externalResizer":     map[string]any{"enabled": false},
			"externalSnapshotter": map[string]any{"enabled": false},
		},
		"storageClasses":        []any{class("generic"), class("local")},
		"volumeSnapshotClasses": []any{},
		"upstreams": map[string]any{
			"generic": map[string]any{
				"image": genericImage,
				"configFiles": map[string]any{"driver.yaml": map[string]any{
					"driver": "local-hostpath", "csiName": "generic.e2e.example.com",
					"local-hostpath": map[string]any{"shareBasePath": genericData, "stage": true},
				}},
				"extraVolumes":      []any{map[string]any{"name": "generic-data", "hostPath": map[string]any{"path": genericData, "type": "DirectoryOrCreate"}}},
				"extraVolumeMounts": []any{map[string]any{"name": "generic-data", "mountPath": genericData}},
				"controller":        map[string]any{"args": serve("controller")},
				"node":              map[string]any{"args": serve("node", "--node-id=$(NODE_NAME)"), "hostNetwork": true},
				"connection": map[string]any{"proxy": map[string]any{"perDriver": map[string]any{
					"topology": []any{map[string]any{"requirements": map[string]any{"zone": "zone1"}}}}}},
			},
			"local": map[string]any{
				"democraticCsi": map[string]any{"driverConfig": map[string]any{
					"driver": "local-hostpath", "instance_id": nil,
					"local-hostpath": map[string]any{"shareBasePath": dcsiData, "controllerBasePath": dcsiData,
						"dirPermissionsMode": "0777", "dirPermissionsUser": "root", "dirPermissionsGroup": "root"},
				}},
				"connection": map[string]any{"proxy": map[string]any{"perDriver": map[string]any{
					"upstreamTopology": map[string]any{prefix + "/node": "node"}}}},
			},
		},
	}
}

// TestUpstreamsInPods (SPEC §14, issue 29): the chart rendered with two
// upstreams is installed in a namespace of its own; the real Deployment
// and ReplicaSet controllers and kube-scheduler make and place the
// controller Pod, the node Pod is the DaemonSet's for one node. Every
// container of both pods that exists as a binary here runs as a process
// with the Pod's args, env and volumes (podRun): the upstreams'
// containers (genericImage as proxy-topology's standalone local-hostpath;
// democratic-csi's as `node $DEMOCRATIC_CSI/bin/democratic-csi`, skipped
// with a message when DEMOCRATIC_CSI is unset), proxy-topology (which
// reaches the upstreams at /csi/upstreams/<name>/csi.sock, the rendered
// connections' endpoints, in a mount namespace of its own) and the real
// csi-provisioner, and, when their binaries are given (CSI_NODE_DRIVER_REGISTRAR,
// CSI_LIVENESSPROBE), the node-driver-registrar, to which the test plays
// kubelet through the plugin-registration API (runRegistrar), and the
// liveness probes, whose /healthz must answer 200; registerDriver writes
// CSINode as kubelet does after registration. For each upstream a
// first-consumer claim binds with the real scheduler and provisioner, and
// NodeStageVolume and NodePublishVolume sent to the node pod's
// proxy-topology reach the upstream's node container: a file written in
// the target path is found in that upstream's storage. democratic-csi's
// claim goes through a second release in node-local mode (subtest local).
func TestUpstreamsInPods(t *testing.T) {
	c := withControlPlane(t)
	ctx := context.Background()
	dcsi := os.Getenv(democraticEnv)
	if dcsi == "" {
		t.Logf("%s is not set: democratic-csi's containers (upstream local) are not run and its claim is skipped; set it to a democratic-csi source tree with node_modules (make interop's) to run them", democraticEnv)
	} else if _, err := os.Stat(filepath.Join(dcsi, "node_modules")); err != nil {
		t.Fatalf("%s=%s: not a democratic-csi source tree with node_modules: %v", democraticEnv, dcsi, err)
	}
	// Unix socket paths are limited to 108 bytes; t.TempDir is too long.
	base, err := os.MkdirTemp("", "ptups-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	data := map[string]string{"generic": filepath.Join(base, "generic"), "local": filepath.Join(base, "dcsi")}
	for _, d := range data {
		// What kubelet does for their hostPath volumes (DirectoryOrCreate).
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	installRelease(t, c, upsRelease, upsNamespace, upsValues(data["generic"], data["local"]), base)

	// The node: zone1, schedulable once its node plugin is registered.
	labels := map[string]string{zoneLabel: "zone1", regionLbl: "region1", "kubernetes.io/hostname": upsNode}
	if _, err := c.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: upsNode, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.client.StorageV1().CSINodes().Delete(context.Background(), upsNode, metav1.DeleteOptions{})
		_ = c.client.CoreV1().Nodes().Delete(context.Background(), upsNode, metav1.DeleteOptions{})
	})
	ds, err := c.client.AppsV1().DaemonSets(upsNamespace).Get(ctx, upsRelease+"-proxy-topology-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodePod := daemonSetPod(t, c, ds, ds.Spec.Template, upsNode)
	if !nodePod.pod.Spec.HostNetwork {
		t.Error("the node pod does not use the host network, which generic's node side asks for")
	}
	upstreams := []string{"generic"}
	if dcsi != "" {
		upstreams = append(upstreams, "local")
	}
	for _, name := range []string{"generic", "local"} {
		if p := deploycheck.UpstreamWiring(nodePod.pod.Spec, name, true); len(p) > 0 {
			t.Errorf("node pod: %v", p)
		}
	}
	nodeRan := []string{"proxy-topology"}
	for _, name := range upstreams {
		startUpstreamContainer(t, nodePod, name, dcsi)
		nodeRan = append(nodeRan, "upstream-"+name)
	}
	nodeProxy := startNodeContainer(t, nodePod)
	nodeRan = append(nodeRan, runNodeSidecars(t, nodePod, upsDriver)...)
	if err := registerDriver(c.client, upsDriver, upsNode, nodeInfo(t, nodeProxy)); err != nil {
		t.Fatal(err)
	}
	if err := schedulable(ctx, c, upsNode, labels); err != nil {
		t.Fatal(err)
	}

	// The controller Pod, made by the Deployment and placed by the
	// scheduler on the one node it may use.
	dep, err := c.client.AppsV1().Deployments(upsNamespace).Get(ctx, upsRelease+"-proxy-topology-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctrlPod := newPodRun(t, c, waitPod(t, c, upsNamespace, metav1.FormatLabelSelector(dep.Spec.Selector)))
	for _, name := range []string{"generic", "local"} {
		if p := deploycheck.UpstreamWiring(ctrlPod.pod.Spec, name, false); len(p) > 0 {
			t.Errorf("controller pod: %v", p)
		}
	}
	ctrlRan := []string{"proxy-topology", "csi-provisioner"}
	for _, name := range upstreams {
		startUpstreamContainer(t, ctrlPod, name, dcsi)
		ctrlRan = append(ctrlRan, "upstream-"+name)
	}
	ctrl := startControllerContainer(t, ctrlPod, "proxy-topology controller (upstreams)")
	prov, _ := sidecar(t, ctrlPod, "csi-provisioner", "CSI_PROVISIONER")
	if bin := optionalSidecar(t, ctrlPod, "liveness-probe"); bin != "" {
		runLivenessProbe(t, ctrlPod, bin)
		ctrlRan = append(ctrlRan, "liveness-probe")
	}
	logContainers(t, ctrlPod, ctrlRan)
	logContainers(t, nodePod, nodeRan)
	s := &stack{c: c, provisioner: prov, controller: ctrl}
	ensureModesNamespace(t, c)

	t.Run("generic", func(t *testing.T) {
		bindAndWrite(t, s, nodeProxy, upsDriver, "generic", "ups-generic", data["generic"], base)
	})
	// democratic-csi's local-hostpath keeps each volume on the node whose
	// controller made it: with upstreamTopology its connection is
	// node-local, which only the node-local mode serves (SPEC §12, §13),
	// so its claim goes through a second release in that mode, with the
	// same upstream entry, on the same node.
	t.Run("local", func(t *testing.T) {
		if dcsi == "" {
			t.Skipf("%s is not set: democratic-csi's local-hostpath does not run here", democraticEnv)
		}
		parseRenderedConnection(t, nodePod, "local")
		values := upsValues(data["generic"], data["local"])
		ups := values["upstreams"].(map[string]any)
		delete(ups, "generic")
		values["csiDriver"] = map[string]any{"name": upsNLDriver, "storageCapacity": false}
		values["controller"] = map[string]any{"enabled": false}
		values["nodeLocal"] = map[string]any{"enabled": true, "externalSnapshotter": map[string]any{"enabled": false}}
		values["storageClasses"] = []any{map[string]any{"name": "ups-nl-local", "volumeBindingMode": "WaitForFirstConsumer", "reclaimPolicy": "Delete",
			"parameters": map[string]any{"connection": "local"}}}
		installRelease(t, c, upsNLRelease, upsNLNamespace, values, t.TempDir())
		ds, err := c.client.AppsV1().DaemonSets(upsNLNamespace).Get(ctx, upsNLRelease+"-proxy-topology-node", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod := daemonSetPod(t, c, ds, ds.Spec.Template, upsNode)
		if args := pod.container(t, "upstream-local").Args; !slices.Contains(args, "--csi-mode=controller") {
			t.Errorf("node-local mode: democratic-csi does not serve the controller service: %v", args)
		}
		startUpstreamContainer(t, pod, "local", dcsi)
		proxy := startNodeContainer(t, pod)
		ran := append([]string{"proxy-topology", "upstream-local", "csi-provisioner"}, runNodeSidecars(t, pod, upsNLDriver)...)
		if err := registerDriver(c.client, upsNLDriver, upsNode, nodeInfo(t, proxy)); err != nil {
			t.Fatal(err)
		}
		prov, _ := sidecar(t, pod, "csi-provisioner", "CSI_PROVISIONER")
		logContainers(t, pod, ran)
		bindAndWrite(t, &stack{c: c, provisioner: prov}, proxy, upsNLDriver, "local", "ups-nl-local", data["local"], base)
	})
}

// installRelease renders the chart with values as release in namespace
// (values file in dir) and applies every object; all go when the test
// ends.
func installRelease(t *testing.T, c *cluster, release, namespace string, values map[string]any, dir string) {
	t.Helper()
	b, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, release+"-values.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	installValuesFile(t, c, release, namespace, path)
}

// installValuesFile is installRelease with the values file at path, used
// as it is.
func installValuesFile(t *testing.T, c *cluster, release, namespace, path string) {
	t.Helper()
	ctx := context.Background()
	objs := decodeObjects(t, run(t, tools["HELM"], "template", release, "deploy/helm/proxy-topology", "--namespace", namespace, "--values", path))
	c.ensureNamespace(t, namespace)
	t.Cleanup(func() {
		c.deleteNamespace(t, namespace)
		for _, o := range objs {
			if o.GetNamespace() == "" {
				if r, err := c.resource(o); err == nil {
					_ = r.Delete(context.Background(), o.GetName(), metav1.DeleteOptions{})
				}
			}
		}
	})
	for _, o := range objs {
		if _, err := c.apply(ctx, o, false); err != nil {
			t.Fatalf("installing %s: %v", key(o), err)
		}
	}
}

// bindAndWrite binds a first-consumer claim of class (connection conn of
// driver) for a pod on upsNode, stages and publishes it through the node
// pod's proxy-topology and finds a file written there in storage, then
// deletes pod, claim and volume.
func bindAndWrite(t *testing.T, s *stack, nodeProxy *plugin, driver, conn, class, storage, tmp string) {
	t.Helper()
	ctx := context.Background()
	c := s.c
	claim, app := class, class+"-app"
	createClaim(t, c, claim, class)
	createPod(t, c, app, claim, map[string]string{"kubernetes.io/hostname": upsNode})
	pvc, _ := s.waitBoundAndScheduled(t, claim, app)
	pv, err := c.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != driver || !strings.HasPrefix(pv.Spec.CSI.VolumeHandle, "v:"+conn+"/") {
		t.Fatalf("PV %s is not a volume of connection %s of %s: %+v", pv.Name, conn, driver, pv.Spec.CSI)
	}
	terms, _ := affinityTerms(pv)
	t.Logf("claim %s bound to %s, node affinity %v", claim, pv.Name, terms)

	publishAndWrite(t, nodeProxy, pv, storage, tmp)

	deletePod(t, c, app)
	if err := c.client.CoreV1().PersistentVolumeClaims(modesNamespace).Delete(ctx, claim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitPVGone(t, pv.Name)
}

// startUpstreamContainer runs container upstream-<name> of the pod with
// its args and env (genericImage as proxy-topology, democratic-csi's
// image as node and its bin/democratic-csi of the source tree dcsi) and
// waits until its socket, in the pod's socket volume, answers Probe.
func startUpstreamContainer(t *testing.T, r *podRun, name, dcsi string) *process {
	t.Helper()
	ctr := r.container(t, "upstream-"+name)
	args, env := r.args(t, ctr), r.env(t, ctr)
	bin := binary
	switch {
	case ctr.Image == genericImage:
	case strings.HasPrefix(ctr.Image, dcsiImage):
		bin = "node"
		args = append([]string{filepath.Join(dcsi, "bin", "democratic-csi")}, args...)
	default:
		t.Fatalf("container %s runs %s, which this test has no binary for", ctr.Name, ctr.Image)
	}
	var sock string
	for _, m := range ctr.VolumeMounts {
		if m.MountPath == deploycheck.UpstreamSocketDir {
			sock = filepath.Join(r.volumes[m.Name], "csi.sock")
		}
	}
	p := startContainer(t, fmt.Sprintf("%s (%s/%s)", ctr.Name, r.pod.Name, r.pod.Spec.NodeName), bin, args, envList(env))
	up := &plugin{name: p.name, cmd: p.cmd, logs: p.logs, exited: p.exited, endpoint: "unix://" + sock}
	up.ready(t)
	t.Cleanup(func() { up.conn.Close() })
	return p
}

// logContainers says which containers of the pod run as processes
// (ran) and which do not, and why: the registrar and the liveness probe
// run only when their binaries are given (kubeletSidecars' env vars),
// democratic-csi's needs DEMOCRATIC_CSI. A container the chart adds that
// is none of these fails the test: it must be run or accounted for.
func logContainers(t *testing.T, r *podRun, ran []string) {
	t.Helper()
	var notRun []string
	for _, c := range r.pod.Spec.Containers {
		env, kubelets := kubeletSidecars[c.Name]
		switch {
		case slices.Contains(ran, c.Name):
		case kubelets:
			notRun = append(notRun, fmt.Sprintf("%s (%s is not set)", c.Name, env))
		case strings.HasPrefix(c.Image, dcsiImage):
			notRun = append(notRun, fmt.Sprintf("%s (%s is not set)", c.Name, democraticEnv))
		default:
			t.Errorf("pod %s: container %s is neither run nor accounted for", r.pod.Name, c.Name)
		}
	}
	t.Logf("pod %s: %d containers; run as processes: %v; not run: %v", r.pod.Name, len(r.pod.Spec.Containers), ran, notRun)
}

// parseRenderedConnection parses the connection file the chart rendered
// for upstream name and fails t if proxy-topology refuses it: democratic-csi's
// local-hostpath answers accessible_topology in its own node key, which the
// connection maps with proxy.perDriver.upstreamTopology (SPEC §13).
func parseRenderedConnection(t *testing.T, r *podRun, name string) {
	t.Helper()
	file := filepath.Join(r.volumes["connections"], name+".yaml")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := config.ParseConnection(name+".yaml", data, accessible.Options{}); err != nil {
		t.Fatalf("connection %s rendered by the chart: %v", name, err)
	}
}

// publishAndWrite stages and publishes pv through the node pod's
// proxy-topology, writes a file in the target path and finds it under
// storage (the upstream's base directory), then unpublishes and
// unstages. Paths are under tmp, as kubelet's would be under its own
// directory.
func publishAndWrite(t *testing.T, node *plugin, pv *corev1.PersistentVolume, storage, tmp string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nc := csi.NewNodeClient(node.conn)
	staging := filepath.Join(tmp, "kubelet", pv.Name, "globalmount")
	target := filepath.Join(tmp, "kubelet", pv.Name, "mount")
	for _, d := range []string{staging, target} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	capability := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	id, volCtx := pv.Spec.CSI.VolumeHandle, pv.Spec.CSI.VolumeAttributes
	if _, err := nc.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging,
		VolumeCapability: capability, VolumeContext: volCtx}); err != nil {
		t.Fatalf("NodeStageVolume %s: %v", id, err)
	}
	if _, err := nc.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging,
		TargetPath: target, VolumeCapability: capability, VolumeContext: volCtx}); err != nil {
		t.Fatalf("NodePublishVolume %s: %v", id, err)
	}
	name := "written-through-" + pv.Name
	if err := os.WriteFile(filepath.Join(target, name), []byte(pv.Name), 0o644); err != nil {
		t.Fatal(err)
	}
	found := ""
	_ = filepath.WalkDir(storage, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == name {
			found = path
			return fs.SkipAll
		}
		return nil
	})
	if found == "" {
		t.Errorf("%s written in the target path of %s is not in the upstream's storage %s", name, id, storage)
	} else {
		t.Logf("the file written at %s is %s in the upstream's storage", target, found)
	}
	if _, err := nc.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Errorf("NodeUnpublishVolume %s: %v", id, err)
	}
	if _, err := nc.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Errorf("NodeUnstageVolume %s: %v", id, err)
	}
	if _, err := os.Stat(filepath.Join(target, name)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after NodeUnpublishVolume the file is still at the target path: %v", err)
	}
}
