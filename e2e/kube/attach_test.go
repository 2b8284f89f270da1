package kube

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	attachNamespace = "e2e-attach"
	attachDriver    = "attach.e2e.proxy-topology"
	// annControllerManaged is what kubelet puts on its Node when the
	// attach/detach controller is to attach for it (the default).
	annControllerManaged = "volumes.kubernetes.io/controller-managed-attach-detach"
)

// TestAttach is the attach part of scenario 5 of issue 14: a second
// deployment of the Helm chart (release "attach", driver
// attach.e2e.proxy-topology) with csiDriver.attachRequired: true, so the
// chart adds the external-attacher and its RBAC and turns on
// proxy.controllerPublish; its one connection forwards to an upstream
// that publishes. Its controller Pod is made by the real Deployment and
// ReplicaSet controllers and scheduled by kube-scheduler, and its
// proxy-topology, csi-provisioner and csi-attacher containers run with the
// Pod's args (the attacher binary is tools/csi's v4.13.0). A claim is
// bound; a pod using it is scheduled; kube-controller-manager's
// attach/detach controller creates the VolumeAttachment; the real
// csi-attacher calls ControllerPublishVolume through proxy-topology,
// which forwards the node id and returns the upstream's publish_context:
// the VolumeAttachment is attached with that context as its
// attachmentMetadata. Deleting the pod detaches (ControllerUnpublish
// reaches the upstream) and removes the VolumeAttachment.
func TestAttach(t *testing.T) {
	c := withControlPlane(t)
	createNodes(t, c)
	ctx := context.Background()
	up := startFakeUpstream(t, 10*gi, true)

	// Kubelet's part: nodes Ready and attach-managed, the driver registered
	// in their CSINode with the node name as its node id.
	for name := range stackNodes {
		if err := schedulable(ctx, c, name, nil); err != nil {
			t.Fatal(err)
		}
		node, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		node.Annotations[annControllerManaged] = "true"
		if _, err := c.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		addCSINodeDriver(t, c, name, attachDriver)
	}

	// The chart, rendered and installed as release "attach".
	values := map[string]any{
		"csiDriver": map[string]any{"name": attachDriver, "attachRequired": true},
		"node":      map[string]any{"enabled": false},
		"rbac":      map[string]any{"nodeLabels": false},
		"controller": map[string]any{
			"externalResizer":     map[string]any{"enabled": false},
			"externalSnapshotter": map[string]any{"enabled": false},
		},
		"connections":           map[string]any{"published": up.connectionText()},
		"storageClasses":        []any{map[string]any{"name": "e2e-attach", "volumeBindingMode": "Immediate", "parameters": map[string]any{"connection": "published"}}},
		"volumeSnapshotClasses": []any{},
	}
	installRelease(t, c, "attach", attachNamespace, values, t.TempDir())
	drv, err := c.client.StorageV1().CSIDrivers().Get(ctx, attachDriver, metav1.GetOptions{})
	if err != nil || drv.Spec.AttachRequired == nil || !*drv.Spec.AttachRequired {
		t.Fatalf("CSIDriver %s: %v, attachRequired %v", attachDriver, err, drv.Spec.AttachRequired)
	}

	dep, err := c.client.AppsV1().Deployments(attachNamespace).Get(ctx, "attach-proxy-topology-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := waitPod(t, c, attachNamespace, metav1.FormatLabelSelector(dep.Spec.Selector))
	run := newPodRun(t, c, pod)
	startControllerContainer(t, run, "proxy-topology controller (attach)")
	prov, _ := sidecar(t, run, "csi-provisioner", "CSI_PROVISIONER")
	att, attArgs := sidecar(t, run, "csi-attacher", "CSI_ATTACHER")
	if !contains(attArgs, "--leader-election") {
		t.Errorf("csi-attacher runs without --leader-election: %v", attArgs)
	}

	// A claim, bound through the provisioner; a pod that uses it.
	claims := c.client.CoreV1().PersistentVolumeClaims(attachNamespace)
	if _, err := claims.Create(ctx, claimSpec("attached", "e2e-attach"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pv *corev1.PersistentVolume
	waitFor(t, "claim attached bound", 60*time.Second, func() (bool, string) {
		prov.alive(t)
		pvc, err := claims.Get(ctx, "attached", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pvc.Status.Phase != corev1.ClaimBound {
			return false, string(pvc.Status.Phase)
		}
		if pv, err = c.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		return true, ""
	})
	handle := pv.Spec.CSI.VolumeHandle
	upstreamID := handle[strings.LastIndex(handle, "/")+1:]
	zero := int64(0)
	podSpec := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "uses-attached"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "attached"}}}},
		},
	}
	pods := c.client.CoreV1().Pods(attachNamespace)
	if _, err := pods.Create(ctx, podSpec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var node string
	waitFor(t, "pod scheduled", 60*time.Second, func() (bool, string) {
		p, err := pods.Get(ctx, podSpec.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node = p.Spec.NodeName
		return node != "", fmt.Sprint(p.Status.Conditions)
	})

	// The attach/detach controller's VolumeAttachment, attached by the
	// csi-attacher through proxy-topology.
	var va *storagev1.VolumeAttachment
	waitFor(t, "VolumeAttachment attached", 90*time.Second, func() (bool, string) {
		att.alive(t)
		list, err := c.client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range list.Items {
			v := &list.Items[i]
			if v.Spec.Attacher == attachDriver && v.Spec.Source.PersistentVolumeName != nil && *v.Spec.Source.PersistentVolumeName == pv.Name {
				va = v
			}
		}
		if va == nil {
			return false, "no VolumeAttachment for PV " + pv.Name + "\nkube-controller-manager:\n" + tail(filepath.Join(c.dir, "kube-controller-manager.log"))
		}
		return va.Status.Attached, fmt.Sprintf("%+v", va.Status)
	})
	if va.Spec.NodeName != node {
		t.Errorf("VolumeAttachment %s is for node %s; the pod is on %s", va.Name, va.Spec.NodeName, node)
	}
	if diff := cmp.Diff(publishContext(upstreamID, node), va.Status.AttachmentMetadata); diff != "" {
		t.Errorf("VolumeAttachment %s attachmentMetadata, against the upstream's publish_context (-want +got):\n%s", va.Name, diff)
	}
	if got, ok := up.PublishedTo(upstreamID); !ok || got != node {
		t.Errorf("the upstream has volume %s published to %q (%v), want %s", upstreamID, got, ok, node)
	}
	t.Logf("VolumeAttachment %s: attached to %s, metadata %v", va.Name, node, va.Status.AttachmentMetadata)

	// Detach: the pod goes, the attach/detach controller deletes the
	// VolumeAttachment, the attacher unpublishes first.
	if err := pods.Delete(ctx, podSpec.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "VolumeAttachment removed", 90*time.Second, func() (bool, string) {
		att.alive(t)
		_, err := c.client.StorageV1().VolumeAttachments().Get(ctx, va.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if _, ok := up.PublishedTo(upstreamID); ok {
		t.Errorf("volume %s is still published on the upstream after detach", upstreamID)
	}
	if err := claims.Delete(ctx, "attached", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "PV deleted", 60*time.Second, func() (bool, string) {
		_, err := c.client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if n := up.Volumes(); n != 0 {
		t.Errorf("%d volumes left on the upstream", n)
	}
}

// addCSINodeDriver adds driver to a node's CSINode (creating it), with
// the node name as node id, as kubelet does when the driver's registrar
// registers; removed when the test ends.
func addCSINodeDriver(t *testing.T, c *cluster, node, driver string) {
	t.Helper()
	ctx := context.Background()
	csiNodes := c.client.StorageV1().CSINodes()
	cn, err := csiNodes.Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		n, err := c.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cn = &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: node, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Node", Name: node, UID: n.UID}}}}
		if cn, err = csiNodes.Create(ctx, cn, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
	cn.Spec.Drivers = append(cn.Spec.Drivers, storagev1.CSINodeDriver{Name: driver, NodeID: node})
	if _, err := csiNodes.Update(ctx, cn, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cn, err := csiNodes.Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return
		}
		var keep []storagev1.CSINodeDriver
		for _, d := range cn.Spec.Drivers {
			if d.Name != driver {
				keep = append(keep, d)
			}
		}
		cn.Spec.Drivers = keep
		_, _ = csiNodes.Update(ctx, cn, metav1.UpdateOptions{})
	})
}
