package kube

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
)

const (
	driverName = "org.democratic-csi.proxy-topology"
	prefix     = "org.democratic-csi.topology"
	zoneLabel  = "topology.kubernetes.io/zone"
	regionLbl  = "topology.kubernetes.io/region"
)

// testNodes are the Node objects the tests create, with the labels a cloud
// provider would set.
var testNodes = map[string]map[string]string{
	"worker-zone1-a": {zoneLabel: "zone1", regionLbl: "region1", "kubernetes.io/hostname": "worker-zone1-a"},
	"worker-zone2-a": {zoneLabel: "zone2", regionLbl: "region1", "kubernetes.io/hostname": "worker-zone2-a"},
	"worker-zone2-b": {zoneLabel: "zone2", regionLbl: "region1", "kubernetes.io/hostname": "worker-zone2-b"},
	// No zone or region labels: a bare-metal node.
	"worker-bare": {"kubernetes.io/hostname": "worker-bare"},
}

var nodesOnce sync.Once

func createNodes(t *testing.T, c *cluster) {
	t.Helper()
	var err error
	nodesOnce.Do(func() {
		for name, labels := range testNodes {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
			if _, e := c.client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); e != nil && !apierrors.IsAlreadyExists(e) {
				err = e
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// startNodePlugin runs a node plugin for node with the deployed config and
// the node ServiceAccount's token, the way the DaemonSet's pod would.
func startNodePlugin(t *testing.T, c *cluster, node, token, config string) *plugin {
	t.Helper()
	return startPlugin(t, "node plugin "+node, []string{"CSI_NODE_ID=" + node},
		"--mode=node", "--config="+config, "--kubeconfig="+c.kubeconfig(t, token))
}

func nodeInfo(t *testing.T, p *plugin) *csi.NodeGetInfoResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := csi.NewNodeClient(p.conn).NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil {
		t.Fatalf("%s: NodeGetInfo: %v", p.name, err)
	}
	return info
}

// TestNodeLabels runs node plugins with the deployed config (zone and
// region from nodeLabel rules), authenticated as the node plugin's own
// ServiceAccount under the deployed RBAC, and checks what they report;
// then registers them as kubelet would and checks the cluster-wide view.
func TestNodeLabels(t *testing.T) {
	c := deployed(t)
	createNodes(t, c)
	token := c.token(t, Namespace, "proxy-topology-node")
	config := deployedConfig(t, nil)

	want := map[string]map[string]string{}
	for name, labels := range testNodes {
		seg := map[string]string{prefix + "/cluster": "local"}
		if z, ok := labels[zoneLabel]; ok {
			seg[prefix+"/zone"] = z
		}
		if r, ok := labels[regionLbl]; ok {
			seg[prefix+"/region"] = r
		}
		want[name] = seg
	}

	plugins := map[string]*plugin{}
	for name := range testNodes {
		plugins[name] = startNodePlugin(t, c, name, token, config)
	}
	infos := map[string]*csi.NodeGetInfoResponse{}
	for name, p := range plugins {
		p.ready(t)
		info := nodeInfo(t, p)
		infos[name] = info
		if info.GetNodeId() != name {
			t.Errorf("%s: node_id %q", name, info.GetNodeId())
		}
		if diff := cmp.Diff(want[name], info.GetAccessibleTopology().GetSegments()); diff != "" {
			t.Errorf("%s: segments (-want +got):\n%s", name, diff)
		}
	}

	// Kubelet's part: the labeled nodes register consistently.
	labeled := []string{"worker-zone1-a", "worker-zone2-a", "worker-zone2-b"}
	for _, name := range labeled {
		if err := register(c.client, name, infos[name]); err != nil {
			t.Fatal(err)
		}
	}
	topologies, err := checkConsistency(c.client)
	if err != nil {
		t.Fatal(err)
	}
	// What the external-provisioner sees for Immediate claims with
	// --immediate-topology=true: one term per distinct topology.
	wantTopologies := []string{
		prefix + "/cluster=local," + prefix + "/region=region1," + prefix + "/zone=zone1",
		prefix + "/cluster=local," + prefix + "/region=region1," + prefix + "/zone=zone2",
	}
	if diff := cmp.Diff(wantTopologies, topologies); diff != "" {
		t.Errorf("distinct topologies (-want +got):\n%s", diff)
	}

	// A node without zone labels reports fewer keys. Kubelet registers it
	// all the same, but the cluster is then inconsistent: the provisioner
	// pairs every node's labels with one CSINode's keys. The check says so
	// (docs/kubernetes.md: label every node, or add a fallback rule).
	if err := register(c.client, "worker-bare", infos["worker-bare"]); err != nil {
		t.Fatal(err)
	}
	_, err = checkConsistency(c.client)
	if err == nil || !strings.Contains(err.Error(), `node worker-bare reports topology keys [`+prefix+`/cluster]`) {
		t.Errorf("consistency with worker-bare: %v; want the bare node named", err)
	}
	if err := c.client.StorageV1().CSINodes().Delete(context.Background(), "worker-bare", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestNodeLabelsVerbatimKey: a rule may report the standard label key
// itself; its value then equals the node's own label, which kubelet
// accepts.
func TestNodeLabelsVerbatimKey(t *testing.T) {
	c := deployed(t)
	createNodes(t, c)
	config := deployedConfig(t, func(cfg map[string]any) {
		rules, _, err := unstructured.NestedSlice(cfg, "proxy", "nodeTopology", "fromRegexp")
		if err != nil || len(rules) == 0 {
			t.Fatalf("deployed config has no proxy.nodeTopology.fromRegexp: %v", err)
		}
		edited := false
		for _, r := range rules {
			if rule, ok := r.(map[string]any); ok && rule["topologyKey"] == "zone" {
				rule["topologyKey"], edited = zoneLabel, true
			}
		}
		if !edited {
			t.Fatal("deployed config has no fromRegexp rule with topologyKey zone")
		}
		if err := unstructured.SetNestedSlice(cfg, rules, "proxy", "nodeTopology", "fromRegexp"); err != nil {
			t.Fatal(err)
		}
	})
	p := startNodePlugin(t, c, "worker-zone2-b", c.token(t, Namespace, "proxy-topology-node"), config)
	p.ready(t)
	info := nodeInfo(t, p)
	want := map[string]string{prefix + "/cluster": "local", zoneLabel: "zone2", prefix + "/region": "region1"}
	if diff := cmp.Diff(want, info.GetAccessibleTopology().GetSegments()); diff != "" {
		t.Errorf("segments (-want +got):\n%s", diff)
	}
	node, err := c.client.CoreV1().Nodes().Get(context.Background(), "worker-zone2-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := labelConflicts(node, info.GetAccessibleTopology().GetSegments()); err != nil {
		t.Error(err)
	}
}

// register does what kubelet does with NodeGetInfo when the registrar
// announces the driver: each segment becomes a Node label (refused if the
// Node already has that label with another value) and the driver entry of
// the CSINode lists the topology keys.
func register(client kubernetes.Interface, nodeName string, info *csi.NodeGetInfoResponse) error {
	return registerDriver(client, driverName, nodeName, info)
}

// registerDriver is register for a driver of another name (a second
// release's); the CSINode lists that driver alone.
func registerDriver(client kubernetes.Interface, driver, nodeName string, info *csi.NodeGetInfoResponse) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	segments := info.GetAccessibleTopology().GetSegments()
	node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if err := labelConflicts(node, segments); err != nil {
		return err
	}
	for k, v := range segments {
		node.Labels[k] = v
	}
	if node, err = client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("labelling node %s: %w", nodeName, err)
	}
	keys := make([]string, 0, len(segments))
	for k := range segments {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	drv := storagev1.CSINodeDriver{Name: driver, NodeID: info.GetNodeId(), TopologyKeys: keys}
	if n := info.GetMaxVolumesPerNode(); n > 0 {
		c := int32(n)
		drv.Allocatable = &storagev1.VolumeNodeResources{Count: &c}
	}
	csiNode := &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Node", Name: nodeName, UID: node.UID,
		}}},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{drv}},
	}
	if _, err := client.StorageV1().CSINodes().Create(ctx, csiNode, metav1.CreateOptions{}); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("CSINode %s: %w", nodeName, err)
		}
		old, err := client.StorageV1().CSINodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		old.Spec = csiNode.Spec
		if _, err := client.StorageV1().CSINodes().Update(ctx, old, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("CSINode %s: %w", nodeName, err)
		}
	}
	return nil
}

// labelConflicts is kubelet's check: a segment may not change an existing
// node label.
func labelConflicts(node *corev1.Node, segments map[string]string) error {
	for k, v := range segments {
		if old, ok := node.Labels[k]; ok && old != v {
			return fmt.Errorf("node %s: segment %s=%s conflicts with the node's label %s=%s; kubelet would refuse the driver", node.Name, k, v, k, old)
		}
	}
	return nil
}

// checkConsistency reads every CSINode entry of the driver and its Node:
// all nodes must report the same topology keys, and each Node must carry a
// label for each key (kubelet's copy of the segment). It returns the
// distinct topologies, each as sorted key=value pairs.
func checkConsistency(client kubernetes.Interface) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := client.StorageV1().CSINodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	type entry struct {
		node string
		keys []string
	}
	var entries []entry
	sets := map[string]int{}
	var errs []string
	for _, cn := range list.Items {
		for _, d := range cn.Spec.Drivers {
			if d.Name != driverName {
				continue
			}
			if d.NodeID != cn.Name {
				errs = append(errs, fmt.Sprintf("CSINode %s: node id %q is not the node name", cn.Name, d.NodeID))
			}
			ks := append([]string(nil), d.TopologyKeys...)
			sort.Strings(ks)
			entries = append(entries, entry{cn.Name, ks})
			sets[fmt.Sprint(ks)]++
		}
	}
	// The key set most nodes report is the reference; the others are named.
	ref := ""
	for set, n := range sets {
		if n > sets[ref] || n == sets[ref] && set < ref {
			ref = set
		}
	}
	distinct := map[string]bool{}
	for _, e := range entries {
		if fmt.Sprint(e.keys) != ref {
			errs = append(errs, fmt.Sprintf("node %s reports topology keys %v, %d other node(s) %s", e.node, e.keys, sets[ref], ref))
		}
		node, err := client.CoreV1().Nodes().Get(ctx, e.node, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		var pairs []string
		for _, k := range e.keys {
			v, ok := node.Labels[k]
			if !ok {
				errs = append(errs, fmt.Sprintf("node %s has no label %s for its topology key", e.node, k))
			}
			pairs = append(pairs, k+"="+v)
		}
		distinct[strings.Join(pairs, ",")] = true
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return nil, fmt.Errorf("inconsistent topology: %s", strings.Join(errs, "; "))
	}
	return keys(distinct), nil
}

// TestNodeLabelsStartupErrors: a node plugin whose Node is missing, or
// whose ServiceAccount may not read Nodes, retries with backoff and then
// stops with an error that says what to fix, instead of registering
// without its label segments.
func TestNodeLabelsStartupErrors(t *testing.T) {
	c := deployed(t)
	createNodes(t, c)
	config := deployedConfig(t, nil)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "no-rbac", Namespace: Namespace}}
	if _, err := c.client.CoreV1().ServiceAccounts(Namespace).Create(context.Background(), sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		node, sa string
		want     []string
	}{
		"node missing": {"ghost", "proxy-topology-node", []string{`no Node named \"ghost\"`, "spec.nodeName", `nodes \"ghost\" not found`}},
		"no RBAC": {"worker-zone1-a", "no-rbac", []string{
			`RBAC denies it: the node plugin's ServiceAccount needs verb \"get\" on resource \"nodes\"`,
			`system:serviceaccount:proxy-topology:no-rbac`,
		}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			p := startNodePlugin(t, c, tc.node, c.token(t, Namespace, tc.sa), config)
			if code := p.exit(t, 90*time.Second); code == 0 {
				t.Errorf("exit code 0")
			}
			took := time.Since(start)
			logs := p.logs.String()
			for _, w := range append(tc.want, "(5 attempts in ") {
				if !strings.Contains(logs, w) {
					t.Errorf("logs do not contain %q:\n%s", w, logs)
				}
			}
			// Four waits, 1+2+4+8 s, bounded by the minute.
			if took < 14*time.Second || took > 70*time.Second {
				t.Errorf("gave up after %s, want about 15s", took)
			}
		})
	}
}

// TestRBAC proves the deployed RBAC is enough and no more: the node
// plugin's ServiceAccount can get Nodes and nothing else here, the
// controller's can read exactly the connections Secret.
func TestRBAC(t *testing.T) {
	c := deployed(t)
	ctx := context.Background()
	nodeSA := "system:serviceaccount:" + Namespace + ":proxy-topology-node"
	ctrlSA := "system:serviceaccount:" + Namespace + ":proxy-topology-controller"
	for _, tc := range []struct {
		user, verb, resource, group, namespace, name string
		allowed                                      bool
	}{
		{nodeSA, "get", "nodes", "", "", "worker-zone1-a", true},
		{nodeSA, "list", "nodes", "", "", "", false},
		{nodeSA, "watch", "nodes", "", "", "", false},
		{nodeSA, "update", "nodes", "", "", "worker-zone1-a", false},
		{nodeSA, "get", "secrets", "", Namespace, "connections", false},
		{nodeSA, "list", "secrets", "", Namespace, "", false},
		{nodeSA, "get", "configmaps", "", Namespace, "proxy-topology-config", false},
		{nodeSA, "get", "pods", "", Namespace, "", false},
		{nodeSA, "get", "csinodes", "storage.k8s.io", "", "worker-zone1-a", false},
		{ctrlSA, "get", "secrets", "", Namespace, "connections", true},
		{ctrlSA, "list", "secrets", "", Namespace, "connections", true},
		{ctrlSA, "watch", "secrets", "", Namespace, "connections", true},
		{ctrlSA, "get", "secrets", "", Namespace, "other", false},
		{ctrlSA, "list", "secrets", "", Namespace, "", false},
		{ctrlSA, "update", "secrets", "", Namespace, "connections", false},
		{ctrlSA, "get", "secrets", "", "kube-system", "connections", false},
		// The sidecars' needs.
		{ctrlSA, "create", "persistentvolumes", "", "", "", true},
		{ctrlSA, "watch", "csinodes", "storage.k8s.io", "", "", true},
		{ctrlSA, "create", "csistoragecapacities", "storage.k8s.io", Namespace, "", true},
		{ctrlSA, "create", "csistoragecapacities", "storage.k8s.io", "default", "", false},
		{ctrlSA, "get", "replicasets", "apps", Namespace, "x", true},
		{ctrlSA, "update", "leases", "coordination.k8s.io", Namespace, "x", true},
		{ctrlSA, "patch", "persistentvolumeclaims", "", "default", "x", false},
		{ctrlSA, "patch", "persistentvolumeclaims/status", "", "default", "x", true},
		{ctrlSA, "update", "persistentvolumeclaims/status", "", "default", "x", false},
		{ctrlSA, "list", "volumesnapshotclasses", "snapshot.storage.k8s.io", "", "", true},
	} {
		res := strings.SplitN(tc.resource, "/", 2)
		attrs := &authorizationv1.ResourceAttributes{Verb: tc.verb, Group: tc.group, Resource: res[0], Namespace: tc.namespace, Name: tc.name}
		if len(res) == 2 {
			attrs.Subresource = res[1]
		}
		sar, err := c.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: tc.user, ResourceAttributes: attrs,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + Namespace, "system:authenticated"}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != tc.allowed {
			t.Errorf("%s %s %s %s/%s: allowed=%v, want %v (%s)", strings.TrimPrefix(tc.user, "system:serviceaccount:"), tc.verb, tc.resource, tc.namespace, tc.name, sar.Status.Allowed, tc.allowed, sar.Status.Reason)
		}
	}

	// And for real, with the tokens the pods would have.
	node := c.as(t, c.token(t, Namespace, "proxy-topology-node"))
	if _, err := node.CoreV1().Nodes().Get(ctx, "worker-zone1-a", metav1.GetOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("node plugin GET node: %v", err)
	}
	if _, err := node.CoreV1().Secrets(Namespace).Get(ctx, "connections", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node plugin GET the connections Secret: %v; want Forbidden", err)
	}
	ctrl := c.as(t, c.token(t, Namespace, "proxy-topology-controller"))
	// NotFound is an answer past authorization: the Secret is the user's
	// and may not exist yet (deploy/kubernetes does not ship it).
	if _, err := ctrl.CoreV1().Secrets(Namespace).Get(ctx, "connections", metav1.GetOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("controller GET the connections Secret: %v", err)
	}
	if _, err := ctrl.CoreV1().Secrets(Namespace).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("controller LIST all Secrets: %v; want Forbidden", err)
	}
	if _, err := ctrl.CoreV1().Secrets(Namespace).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=connections"}); err != nil {
		t.Errorf("controller LIST the connections Secret by name: %v", err)
	}
}
