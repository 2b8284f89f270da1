package kube

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestFirstConnectionProvisions is the fresh install of issue 15's
// capabilities: the controller Pod starts with an empty connections Secret
// (the chart's `connections: {}`), so proxy.capabilities: auto advertises
// no controller capability and the real csi-provisioner, which reads
// capabilities once, refuses the claim ("does not support dynamic
// provisioning"). The admin then adds the class's connection to the
// Secret: the proxy's set grows, it drops the sidecars' connections, the
// provisioner exits at its next call (csi-lib-utils ExitOnConnectionLoss;
// with --enable-capacity it polls GetCapacity every minute) and is
// restarted as kubelet would (startContainer), reads the new set, and the
// claim is Bound; no one restarts anything by hand.
func TestFirstConnectionProvisions(t *testing.T) {
	s := startStackWith(t, nil)
	c := s.c
	ensureModesNamespace(t, c)
	class := shippedClass(t, c, "proxy-topology-anywhere")
	conn := class.Parameters["connection"]
	tmpl, ok := stackConnections[conn]
	if !ok {
		t.Fatalf("class %s names connection %q, which the stack does not define", class.Name, conn)
	}
	pvc := createClaim(t, c, "first", class.Name)

	deadline := time.Now().Add(60 * time.Second)
	for s.provisioningFailed(t, pvc.Name, "does not support dynamic provisioning") == "" {
		if time.Now().After(deadline) {
			t.Fatalf("after 60s the provisioner has not refused claim %s for lack of capabilities\nevents:\n%s", pvc.Name, s.events(t))
		}
		time.Sleep(250 * time.Millisecond)
	}

	editConnections(t, c, func(data map[string][]byte) {
		data[conn+".yaml"] = []byte(fmt.Sprintf(tmpl, filepath.Join(s.base, conn)))
	})
	added := time.Now()
	// Up to a minute for the capacity poll, then the restart, the leader
	// lease and the provisioning.
	deadline = time.Now().Add(150 * time.Second)
	for {
		s.provisioner.alive(t)
		got, err := c.client.CoreV1().PersistentVolumeClaims(modesNamespace).Get(context.Background(), pvc.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase == corev1.ClaimBound {
			t.Logf("claim %s Bound %s after its connection was added", pvc.Name, time.Since(added).Round(time.Second))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("claim %s is %s 150s after its connection was added\nevents:\n%s", pvc.Name, got.Status.Phase, s.events(t))
		}
		time.Sleep(250 * time.Millisecond)
	}
	if !strings.Contains(s.controller.logs.String(), "closed the CSI socket's client connections") {
		t.Errorf("the controller did not say it dropped the sidecars' connections:\n%s", s.controller.logs)
	}
	if s.provisioner.restarts.Load() == 0 {
		t.Error("the claim was bound without the provisioner restarting: it read capabilities again some other way")
	}
}
