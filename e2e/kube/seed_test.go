package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// bindThroughSeedRelease runs the seed release's pods as kubelet would:
// the DaemonSet's pod on each node (its node plugin, registered), then
// the controller Pod's proxy-topology and csi-provisioner with the args
// and env of the Pod object, so the seed's extraArgs reach the real
// provisioner through the chart. A first-consumer claim of a class of the
// added connection is Bound by them: its pod lands on the only zone1 node
// (the provisioner published capacity for zone1 only), and the PV's node
// affinity is that node's topology (--strict-topology=true, the seed's).
func bindThroughSeedRelease(t *testing.T, c *cluster, pod *corev1.Pod, daemonSet string) {
	t.Helper()
	ctx := context.Background()
	ns := pod.Namespace
	const conn = "seed-zone1"
	base := t.TempDir()
	secrets := c.client.CoreV1().Secrets(ns)
	sec, err := secrets.Get(ctx, "connections", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the seed release's connections Secret: %v", err)
	}
	if sec.Data == nil {
		sec.Data = map[string][]byte{}
	}
	// The seed's values name no connection (its connections volume is the
	// user's Secret): add what a user adds, a local-hostpath connection (a
	// real driver this machine can serve) with nfs-zone1's topology.
	sec.Data[conn+".yaml"] = []byte(fmt.Sprintf(stackConnections["nfs-zone1"], filepath.Join(base, conn)))
	if _, err := secrets.Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	registerDaemonSetNodes(t, c, ns, daemonSet, stackNodes)

	run := newPodRun(t, c, pod)
	ctrl := startControllerContainer(t, run, "proxy-topology controller (seed)")
	prov, provArgs := sidecar(t, run, "csi-provisioner", "CSI_PROVISIONER")
	for _, f := range seedExtraArgs(t) {
		if n := count(provArgs, f); n != 1 {
			t.Errorf("the seed's extraArgs %s is in the running csi-provisioner's args %d times: %v", f, n, provArgs)
		}
	}

	class := "seed-first-consumer"
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Provisioner: driverName,
		VolumeBindingMode: &wffc, Parameters: map[string]string{"connection": conn}}
	if _, err := c.client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.client.StorageV1().StorageClasses().Delete(context.Background(), class, metav1.DeleteOptions{})
	})
	ensureModesNamespace(t, c)
	s := &stack{c: c, base: base, provisioner: prov, controller: ctrl}
	createClaim(t, c, "seed-claim", class)
	createPod(t, c, "seed-app", "seed-claim", nil)
	pvc, p := s.waitBoundAndScheduled(t, "seed-claim", "seed-app")
	if p.Spec.NodeName != "worker-zone1-a" {
		t.Errorf("pod seed-app is on %s; only worker-zone1-a is in zone1", p.Spec.NodeName)
	}
	pv, err := c.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Spec.CSI == nil || !strings.HasPrefix(pv.Spec.CSI.VolumeHandle, "v:"+conn+"/") {
		t.Fatalf("PV %s is not a volume of connection %s: %+v", pv.Name, conn, pv.Spec.CSI)
	}
	got, err := affinityTerms(pv)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{pairs(map[string]string{prefix + "/cluster": "local", prefix + "/region": "region1", prefix + "/zone": "zone1"})}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PV %s node affinity (-want +got):\n%s", pv.Name, diff)
	}
	dir := s.volumeDir(t, conn, pv)
	if ok, err := recorded(dir); !ok {
		t.Errorf("volume %s is not recorded under its connection's base path: %v", filepath.Base(dir), err)
	}
	t.Logf("seed release: claim seed-claim Bound to %s (affinity %v), pod on %s", pv.Name, got, p.Spec.NodeName)

	deletePod(t, c, "seed-app")
	if err := c.client.CoreV1().PersistentVolumeClaims(modesNamespace).Delete(ctx, "seed-claim", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitGone(t, pv.Name, dir)
}

// seedExtraArgs are the seed's controller.externalProvisioner.extraArgs.
func seedExtraArgs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, seedValues))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Controller struct {
			ExternalProvisioner struct {
				ExtraArgs []string `json:"extraArgs"`
			} `json:"externalProvisioner"`
		} `json:"controller"`
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", seedValues, err)
	}
	if len(v.Controller.ExternalProvisioner.ExtraArgs) == 0 {
		t.Fatalf("%s has no controller.externalProvisioner.extraArgs", seedValues)
	}
	return v.Controller.ExternalProvisioner.ExtraArgs
}
