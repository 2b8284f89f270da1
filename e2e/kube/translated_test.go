package kube

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/democratic-csi/proxy-topology/internal/testupstream"
	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
)

// TestTranslatedTopology (SPEC §13) with the real csi-provisioner and
// scheduler: a driver: csi connection in front of an upstream that
// answers every volume's accessible_topology in its own key
// ({fake.example.com/zone: zone2}, a testupstream driver in the test
// process), with upstreamTopology mapping that key to the proxy's zone.
// A WaitForFirstConsumer claim whose pod may only run on worker-zone2-a
// binds with a PV whose node affinity is in the proxy's keys (zone2), and
// the upstream's key never reaches the PV; deleting the claim deletes the
// upstream volume.
func TestTranslatedTopology(t *testing.T) {
	s := startStack(t)
	c := s.c
	ctx := context.Background()
	ensureModesNamespace(t, c)

	const upKey = "fake.example.com/zone"
	up, err := testupstream.Start(filepath.Join(t.TempDir(), "up.sock"), testupstream.Profile{TopologyKey: upKey}, hostpath.Options{
		DriverName: "upstream.example.com", Version: "e2e", NodeID: "zone2", BasePath: filepath.Join(s.base, "translated-upstream"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(up.Stop)
	conn := "translated"
	s.setConnectionText(t, conn, fmt.Sprintf("driver: csi\ncsi:\n  endpoint: %s\nproxy:\n  perDriver:\n    upstreamTopology: {%s: zone}\n    topology:\n    - requirements: {zone: zone2}\n", up.Endpoint, upKey))

	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	class := "translated-first-consumer"
	if _, err := c.client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: class}, Provisioner: driverName,
		VolumeBindingMode: &wffc, Parameters: map[string]string{"connection": conn},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.client.StorageV1().StorageClasses().Delete(ctx, class, metav1.DeleteOptions{}) })

	createClaim(t, c, "translated", class)
	createPod(t, c, "translated", "translated", map[string]string{"kubernetes.io/hostname": "worker-zone2-a"})
	pvc, pod := s.waitBoundAndScheduled(t, "translated", "translated")
	if pod.Spec.NodeName != "worker-zone2-a" {
		t.Errorf("pod on %q, want worker-zone2-a", pod.Spec.NodeName)
	}
	pv, err := c.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	terms := rawTerms(t, pv)
	if len(terms) == 0 {
		t.Fatalf("PV %s has no node affinity; want the upstream's zone in the proxy's key", pv.Name)
	}
	for _, term := range terms {
		if !strings.Contains(term, prefix+"/zone=zone2") || strings.Contains(term, upKey) {
			t.Errorf("PV %s node affinity term %s: want %s/zone=zone2 and no %s", pv.Name, term, prefix, upKey)
		}
	}
	t.Logf("PV %s node affinity: %v", pv.Name, terms)

	cc, err := grpc.NewClient(up.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	upstreamVolumes := func() int {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := csi.NewControllerClient(cc).ListVolumes(lctx, &csi.ListVolumesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.GetEntries())
	}
	if n := upstreamVolumes(); n != 1 {
		t.Errorf("upstream holds %d volumes, want 1", n)
	}
	deletePod(t, c, "translated")
	if err := c.client.CoreV1().PersistentVolumeClaims(modesNamespace).Delete(ctx, "translated", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for upstreamVolumes() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after 60s the upstream still holds the volume of the deleted claim\nevents:\n%s", s.events(t))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if t.Failed() {
		t.Logf("events:\n%s", s.events(t))
	}
}
