package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
)

// modesNamespace holds the claims and pods of the scenarios.
const modesNamespace = "e2e-modes"

// TestStorageClassModes is scenario 1 of issue 14 against the real
// components: kube-scheduler, kube-controller-manager (PV binder), the
// real csi-provisioner with the args of deploy/kubernetes' controller Pod,
// and proxy-topology's controller. For each of the three shipped
// StorageClasses (SPEC §9) a claim is Bound, the PV's node affinity is
// exactly what SPEC §9 and docs/topology.md §3 give for the mode, and a
// pod using the claim is scheduled by kube-scheduler onto a node the
// affinity admits (pods never run: there is no kubelet). Deleting the
// claim deletes the volume through the provisioner.
func TestStorageClassModes(t *testing.T) {
	s := startStack(t)
	c := s.c
	ensureModesNamespace(t, c)

	// The flags SPEC §9 gives the modes reach the process from the
	// rendered manifests: mode 3 needs strict topology, mode 1 is exact
	// only with --immediate-topology=false, capacity makes the scheduler
	// avoid zones a WaitForFirstConsumer connection does not serve.
	for _, f := range []string{"--feature-gates=Topology=true", "--strict-topology=true", "--immediate-topology=false", "--enable-capacity"} {
		if !slices.Contains(s.provArgs, f) {
			t.Errorf("the rendered csi-provisioner args lack %s: %v", f, s.provArgs)
		}
	}

	zone := prefix + "/zone"
	// Capacity tracking (docs/topology.md §5): the provisioner published
	// what proxy-topology's GetCapacity reports for the WaitForFirstConsumer
	// class per node topology: nothing where its connection does not
	// serve, the local file system's free space where it does.
	caps := s.waitCapacity(t, "proxy-topology-first-consumer", 2)
	topo := func(z string) string {
		return pairs(map[string]string{prefix + "/cluster": "local", prefix + "/region": "region1", zone: z})
	}
	if q, ok := caps[topo("zone1")]; !ok || q.Sign() <= 0 {
		t.Errorf("capacity of proxy-topology-first-consumer in zone1: %v (published %v), want > 0", q.String(), ok)
	}
	if q, ok := caps[topo("zone2")]; !ok || q.Sign() != 0 {
		t.Errorf("capacity of proxy-topology-first-consumer in zone2: %v (published %v), want 0", q.String(), ok)
	}
	for _, tc := range []struct {
		mode, class string
		binding     storagev1.VolumeBindingMode
		allowed     bool
		// want is the PV's node affinity: terms, each sorted key=value.
		want []string
		// nodes are the nodes whose labels the affinity admits.
		nodes []string
	}{
		{
			// No requirements: the connection's topology, every entry
			// with its extra label.
			mode: "1 no requirements", class: "proxy-topology-anywhere", binding: storagev1.VolumeBindingImmediate,
			want:  []string{pairs(map[string]string{zone: "zone1", extraLabel: "true"}), pairs(map[string]string{zone: "zone2", extraLabel: "true"})},
			nodes: []string{"worker-zone1-a", "worker-zone2-a"},
		},
		{
			// allowedTopologies zone2, zone3: the allowed zones the
			// connection offers.
			mode: "2 allowedTopologies", class: "proxy-topology-allowed-zones", binding: storagev1.VolumeBindingImmediate, allowed: true,
			want:  []string{pairs(map[string]string{zone: "zone2", extraLabel: "true"})},
			nodes: []string{"worker-zone2-a"},
		},
		{
			// Strict first consumer: the selected node's topology; the
			// connection constrains region and zone, the node's term adds
			// cluster.
			mode: "3 first consumer", class: "proxy-topology-first-consumer", binding: storagev1.VolumeBindingWaitForFirstConsumer,
			want:  []string{pairs(map[string]string{prefix + "/cluster": "local", prefix + "/region": "region1", zone: "zone1"})},
			nodes: []string{"worker-zone1-a"},
		},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			sc := shippedClass(t, c, tc.class)
			if *sc.VolumeBindingMode != tc.binding || (len(sc.AllowedTopologies) > 0) != tc.allowed {
				t.Fatalf("StorageClass %s is no longer mode %s: volumeBindingMode %s, allowedTopologies %v", tc.class, tc.mode, *sc.VolumeBindingMode, sc.AllowedTopologies)
			}
			conn := sc.Parameters["connection"]
			name := strings.TrimPrefix(tc.class, "proxy-topology-")
			pvc := createClaim(t, c, name, tc.class)
			pod := createPod(t, c, name, pvc.Name, nil)

			pvc, pod = s.waitBoundAndScheduled(t, pvc.Name, pod.Name)
			pv, err := c.client.CoreV1().PersistentVolumes().Get(context.Background(), pvc.Spec.VolumeName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != driverName || !strings.HasPrefix(pv.Spec.CSI.VolumeHandle, "v:"+conn+"/") {
				t.Fatalf("PV %s is not a volume of connection %s: %+v", pv.Name, conn, pv.Spec.CSI)
			}
			got, err := affinityTerms(pv)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("PV %s node affinity (-want +got):\n%s", pv.Name, diff)
			}
			node, err := c.client.CoreV1().Nodes().Get(context.Background(), pod.Spec.NodeName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !admits(got, node.Labels) || !slices.Contains(tc.nodes, node.Name) {
				t.Errorf("pod scheduled onto %s (labels %v); the affinity %v admits %v", node.Name, node.Labels, got, tc.nodes)
			}
			t.Logf("PV %s affinity %v; pod on %s", pv.Name, got, node.Name)
			dir := s.volumeDir(t, conn, pv)
			if ok, err := recorded(dir); !ok {
				t.Errorf("volume %s is not recorded under its connection's base path: %v", filepath.Base(dir), err)
			}

			// Reclaim: the real provisioner deletes the volume and the PV.
			deletePod(t, c, pod.Name)
			if err := c.client.CoreV1().PersistentVolumeClaims(modesNamespace).Delete(context.Background(), pvc.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			s.waitGone(t, pv.Name, dir)
		})
	}
}

func ensureModesNamespace(t *testing.T, c *cluster) {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: modesNamespace}}
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// Pods need the "default" ServiceAccount the controller-manager makes.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := c.client.CoreV1().ServiceAccounts(modesNamespace).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("no default ServiceAccount in %s: %v", modesNamespace, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// claimSpec is a 1Gi ReadWriteOnce claim of class.
func claimSpec(name, class string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
}

func createClaim(t *testing.T, c *cluster, name, class string) *corev1.PersistentVolumeClaim {
	t.Helper()
	out, err := c.client.CoreV1().PersistentVolumeClaims(modesNamespace).Create(context.Background(), claimSpec(name, class), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// createPod makes a pod that mounts the claim; nodeSelector pins it.
func createPod(t *testing.T, c *cluster, name, claim string, nodeSelector map[string]string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeSelector: nodeSelector,
			Containers: []corev1.Container{{
				Name: "app", Image: "registry.k8s.io/pause:3.10",
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
			}}},
		},
	}
	out, err := c.client.CoreV1().Pods(modesNamespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// deletePod removes a pod at once: no kubelet will confirm a graceful
// deletion.
func deletePod(t *testing.T, c *cluster, name string) {
	t.Helper()
	zero := int64(0)
	if err := c.client.CoreV1().Pods(modesNamespace).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// waitBoundAndScheduled waits for the claim to be Bound and the pod to
// have a node.
func (s *stack) waitBoundAndScheduled(t *testing.T, claim, pod string) (*corev1.PersistentVolumeClaim, *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(120 * time.Second)
	for {
		s.provisioner.alive(t)
		pvc, err := s.c.client.CoreV1().PersistentVolumeClaims(modesNamespace).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := s.c.client.CoreV1().Pods(modesNamespace).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pvc.Status.Phase == corev1.ClaimBound && p.Spec.NodeName != "" {
			return pvc, p
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 120s: claim %s is %s (annotations %v), pod %s on node %q (conditions %v)\nevents:\n%s",
				claim, pvc.Status.Phase, pvc.Annotations, pod, p.Spec.NodeName, p.Status.Conditions, s.events(t))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// events lists the scenario namespace's events, for failure messages.
func (s *stack) events(t *testing.T) string {
	t.Helper()
	list, err := s.c.client.CoreV1().Events(modesNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range list.Items {
		fmt.Fprintf(&b, "  %s %s/%s %s: %s\n", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
	}
	return b.String()
}

// volumeDir is where the local-hostpath connection keeps the PV's volume.
func (s *stack) volumeDir(t *testing.T, conn string, pv *corev1.PersistentVolume) string {
	t.Helper()
	id := hostpath.VolumeDir(pv.Spec.CSI.VolumeHandle[strings.LastIndex(pv.Spec.CSI.VolumeHandle, "/")+1:])
	return filepath.Join(s.base, conn, "volumes", id)
}

// recorded reports whether the built-in driver records the volume whose
// directory is dir (<base>/volumes/<id>) under its base path. An empty
// volume's directory is made at its first NodeStage or NodePublish, so
// where no kubelet publishes, the record is what proves the volume.
func recorded(dir string) (bool, error) {
	base := filepath.Dir(filepath.Dir(dir))
	vols, err := hostpath.VolumesAt(base)
	if err != nil {
		return false, err
	}
	if _, ok := vols[filepath.Base(dir)]; !ok {
		return false, fmt.Errorf("%d volumes recorded under %s, not %s", len(vols), base, filepath.Base(dir))
	}
	return true, nil
}

// waitGone waits for the PV to be deleted and its volume gone: no record
// under the base path and no directory.
func (s *stack) waitGone(t *testing.T, pv, dir string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := s.c.client.CoreV1().PersistentVolumes().Get(context.Background(), pv, metav1.GetOptions{})
		_, statErr := os.Stat(dir)
		rec, recErr := recorded(dir)
		if apierrors.IsNotFound(err) && os.IsNotExist(statErr) && !rec {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60s: PV %s: %v; volume directory: %v; recorded: %v (%v)\nevents:\n%s", pv, err, statErr, rec, recErr, s.events(t))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
