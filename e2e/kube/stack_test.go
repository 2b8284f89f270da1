package kube

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// extraLabel is the `extra` node-affinity label of the iscsi-multizone
// connection (examples/connections): only nodes an admin labelled with it
// may use its volumes.
const extraLabel = "storage.example.com/iscsi"

// stackNodes are the nodes kube-scheduler may use, with the labels an
// admin adds; worker-zone2-b lacks extraLabel. (worker-bare stays
// unschedulable: no allocatable pods.)
var stackNodes = map[string]map[string]string{
	"worker-zone1-a": {extraLabel: "true"},
	"worker-zone2-a": {extraLabel: "true"},
	"worker-zone2-b": {},
}

// stackConnections are the connections the shipped StorageClasses name,
// as local-hostpath storage with the topology of examples/connections
// (whose real drivers are not here). %s is the base path.
var stackConnections = map[string]string{
	"iscsi-multizone": `driver: local-hostpath
local-hostpath:
  shareBasePath: %s
proxy:
  perDriver:
    topology:
    - requirements: {zone: zone1}
      extra: {storage.example.com/iscsi: "true"}
    - requirements: {zone: zone2}
      extra: {storage.example.com/iscsi: "true"}
`,
	"nfs-zone1": `driver: local-hostpath
local-hostpath:
  shareBasePath: %s
proxy:
  perDriver:
    topology:
    - requirements: {region: region1, zone: zone1}
`,
}

// stack is the storage side of a real cluster: the controller Pod of
// deploy/kubernetes (made by the real Deployment and ReplicaSet
// controllers, scheduled by kube-scheduler) run by podRun with its
// proxy-topology, csi-provisioner and csi-resizer containers, the node
// DaemonSet's pod on each node run by podRun and registered as kubelet
// would, nodes Ready, and the shipped StorageClasses' connections in the
// connections Secret.
type stack struct {
	c           *cluster
	base        string // connection name -> base + "/" + name
	controller  *plugin
	provisioner *process
	provArgs    []string
	resizer     *process
	run         *podRun // the controller Pod
}

func startStack(t *testing.T) *stack {
	t.Helper()
	return startStackWith(t, stackConnections)
}

// startStackWith is startStack with the connections Secret holding exactly
// connections (name -> file, %s the base path); with none it does not wait
// for capacity, since nothing can be provisioned.
func startStackWith(t *testing.T, connections map[string]string) *stack {
	t.Helper()
	c := withControlPlane(t)
	createNodes(t, c)
	ctx := context.Background()
	s := &stack{c: c, base: t.TempDir()}

	// The user's part: connections in the Secret, before the pods start
	// (the node pods get them as mounted files). They name this test's
	// directories, so they go when it ends: a later test's pods would
	// make those directories again.
	editConnections(t, c, func(data map[string][]byte) {
		var left []string
		for k := range data {
			if _, ours := stackConnections[strings.TrimSuffix(k, ".yaml")]; !ours {
				left = append(left, k)
			}
		}
		if len(left) > 0 {
			// A node plugin reports <prefix>/node when a node-local
			// connection exists, and kubelet never changes a CSINode's
			// keys: a key another test left would change this one.
			t.Fatalf("the connections Secret holds keys another test left: %v", left)
		}
		if len(connections) == 0 {
			clear(data)
		}
		for name, tmpl := range connections {
			data[name+".yaml"] = []byte(fmt.Sprintf(tmpl, filepath.Join(s.base, name)))
		}
	})
	t.Cleanup(func() {
		editConnections(t, c, func(data map[string][]byte) {
			for name := range stackConnections {
				delete(data, name+".yaml")
			}
		})
	})

	// Kubelet's part for each node: the node DaemonSet's pod runs its node
	// plugin with the Pod's args and env, the driver's topology is
	// registered, the node reports Ready.
	registerDaemonSetNodes(t, c, Namespace, "proxy-topology-node", stackNodes)
	if _, err := checkConsistency(c.client); err != nil {
		t.Fatal(err)
	}

	// The controller Pod, as the Deployment made it.
	dep, err := c.client.AppsV1().Deployments(Namespace).Get(ctx, "proxy-topology-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := waitPod(t, c, Namespace, metav1.FormatLabelSelector(dep.Spec.Selector))
	run := newPodRun(t, c, pod)
	s.run = run

	ctr := run.container(t, "proxy-topology")
	if !strings.HasPrefix(ctr.Image, "ghcr.io/democratic-csi/proxy-topology:") {
		t.Fatalf("container proxy-topology runs %s, not the driver", ctr.Image)
	}
	env := run.env(t, ctr)
	env["KUBECONFIG"] = run.kubecfg // in-cluster config, for a process
	args := run.args(t, ctr)
	proc := startProcess(t, "proxy-topology controller", binary, args, envList(env))
	s.controller = &plugin{name: proc.name, cmd: proc.cmd, logs: proc.logs, exited: proc.exited, endpoint: flagValue(args, "--csi-endpoint")}
	s.controller.ready(t)
	t.Cleanup(func() { s.controller.conn.Close() })

	s.provisioner, s.provArgs = sidecar(t, run, "csi-provisioner", "CSI_PROVISIONER")
	s.resizer, _ = sidecar(t, run, "csi-resizer", "CSI_RESIZER")

	// Ready when the provisioner has published capacity for every zone
	// of the WaitForFirstConsumer class.
	if len(connections) > 0 {
		s.waitCapacity(t, "proxy-topology-first-consumer", 2)
	}
	return s
}

// editConnections changes the keys of the connections Secret, creating it
// first if it does not exist: deploy/kubernetes does not ship it, the user
// makes it (docs/kubernetes.md).
func editConnections(t *testing.T, c *cluster, edit func(data map[string][]byte)) {
	t.Helper()
	ctx := context.Background()
	secrets := c.client.CoreV1().Secrets(Namespace)
	for attempt := 0; ; attempt++ {
		sec, err := secrets.Get(ctx, "connections", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			data := map[string][]byte{}
			edit(data)
			sec = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "connections", Namespace: Namespace}, Data: data}
			if _, err = secrets.Create(ctx, sec, metav1.CreateOptions{}); err == nil {
				return
			}
		} else if err == nil {
			if sec.Data == nil {
				sec.Data = map[string][]byte{}
			}
			edit(sec.Data)
			if _, err = secrets.Update(ctx, sec, metav1.UpdateOptions{}); err == nil {
				return
			}
		}
		// A concurrent edit (another test's cleanup): read again.
		if (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) && attempt < 10 {
			continue
		}
		t.Fatalf("editing the connections Secret: %v", err)
	}
}

// sidecar runs the pod's container name with the binary built here (env
// var tool), which must be the version of the container's image tag; the
// in-cluster config becomes --kubeconfig. It is restarted when it exits,
// as kubelet restarts it (startContainer). It returns the process and its
// args.
func sidecar(t *testing.T, run *podRun, name, tool string) (*process, []string) {
	t.Helper()
	ctr := run.container(t, name)
	if want := name + ":" + toolVersion(tools[tool]); !strings.HasSuffix(ctr.Image, "/"+want) {
		t.Fatalf("container %s runs %s; the binary built here is %s", name, ctr.Image, want)
	}
	args := append(run.args(t, ctr), "--kubeconfig="+run.kubecfg)
	t.Logf("%s %s", name, strings.Join(args, " "))
	return startContainer(t, name, tools[tool], args, envList(run.env(t, ctr))), args
}

// flagValue returns the value of --name=value in args.
func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// toolVersion is the version a binary of .cache/bin is keyed by
// (<name>-<version>).
func toolVersion(path string) string {
	base := filepath.Base(path)
	return base[strings.LastIndex(base, "-")+1:]
}

// waitCapacity waits until the external-provisioner has published
// CSIStorageCapacity objects for class in at least n topologies, and
// returns the capacities by topology ("key=value,..." sorted).
func (s *stack) waitCapacity(t *testing.T, class string, n int) map[string]resource.Quantity {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		s.provisioner.alive(t)
		list, err := s.c.client.StorageV1().CSIStorageCapacities(Namespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]resource.Quantity{}
		for _, sc := range list.Items {
			if sc.StorageClassName != class || sc.Capacity == nil || sc.NodeTopology == nil {
				continue
			}
			got[pairs(sc.NodeTopology.MatchLabels)] = *sc.Capacity
		}
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("the provisioner published capacity for %d topologies of %s after 90s, want %d: %v", len(got), class, n, got)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// pairs renders labels as sorted key=value pairs joined by commas.
func pairs(labels map[string]string) string {
	var out []string
	for k, v := range labels {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// affinityTerms renders a PV's required node affinity as a sorted list of
// terms, each its sorted key=value pairs; only the `In` with one value
// that CSI accessible topology becomes is accepted.
func affinityTerms(pv *corev1.PersistentVolume) ([]string, error) {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return nil, nil
	}
	var terms []string
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		labels := map[string]string{}
		for _, e := range term.MatchExpressions {
			if e.Operator != corev1.NodeSelectorOpIn || len(e.Values) != 1 {
				return nil, fmt.Errorf("PV %s: node affinity expression %v is not key In [value]", pv.Name, e)
			}
			labels[e.Key] = e.Values[0]
		}
		if len(term.MatchFields) > 0 {
			return nil, fmt.Errorf("PV %s: node affinity has matchFields %v", pv.Name, term.MatchFields)
		}
		terms = append(terms, pairs(labels))
	}
	sort.Strings(terms)
	return terms, nil
}

// admits says whether a node's labels satisfy one of the terms.
func admits(terms []string, labels map[string]string) bool {
	if terms == nil {
		return true
	}
	for _, term := range terms {
		ok := true
		for _, kv := range strings.Split(term, ",") {
			k, v, _ := strings.Cut(kv, "=")
			if labels[k] != v {
				ok = false
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// className and connection of a shipped StorageClass, checked against the
// mode the test expects it to be.
func shippedClass(t *testing.T, c *cluster, name string) *storagev1.StorageClass {
	t.Helper()
	sc, err := c.client.StorageV1().StorageClasses().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the shipped StorageClass %s: %v", name, err)
	}
	if sc.Provisioner != driverName {
		t.Fatalf("StorageClass %s: provisioner %s", name, sc.Provisioner)
	}
	if _, ok := stackConnections[sc.Parameters["connection"]]; !ok {
		b, _ := yaml.Marshal(sc)
		t.Fatalf("StorageClass %s names connection %q, which this test does not provide:\n%s", name, sc.Parameters["connection"], b)
	}
	return sc
}
