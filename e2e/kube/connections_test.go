package kube

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// procIdentity tells one process from another that got the same pid: the
// pid and the start time (field 22 of /proc/<pid>/stat, clock ticks since
// boot).
type procIdentity struct {
	pid   int
	start string
}

// servingProcess identifies the process that serves the unix socket of a
// CSI endpoint, as the sidecars reach it: the peer credentials of a fresh
// connection (SO_PEERCRED, the process that listens), then its start time
// from /proc. It does not ask the test's own bookkeeping, so a controller
// replaced behind the socket shows.
func servingProcess(t *testing.T, endpoint string) procIdentity {
	t.Helper()
	path := strings.TrimPrefix(endpoint, "unix://")
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatalf("connecting to %s: %v", path, err)
	}
	defer conn.Close()
	raw, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil || credErr != nil {
		t.Fatalf("%s: peer credentials: %v %v", path, err, credErr)
	}
	pid := int(cred.Pid)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatalf("process %d serving %s: %v", pid, path, err)
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// count the fields after its closing one, starting at field 3.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		t.Fatalf("/proc/%d/stat: no command name in %q", pid, b)
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 22-2 {
		t.Fatalf("/proc/%d/stat: no start time in %q", pid, b)
	}
	return procIdentity{pid: pid, start: fields[22-3]}
}

// TestConnectionsFromSecret is scenario 6 of issue 14: with the stack
// running (the controller Pod's proxy-topology and the real
// csi-provisioner), a connection and a class for it are added; a claim of
// that class fails to provision while the connection is not in the
// connections Secret, and is Bound once the user adds it, by the same
// controller process (same pid and start time in /proc). Then the
// manifests are re-applied as an upgrade would (kustomize build, applied
// to the API server): the Deployment's pod template does not change (no
// rollout), the Secret keeps the user's key, and a new claim through the
// user's connection is Bound by that same process.
func TestConnectionsFromSecret(t *testing.T) {
	s := startStack(t)
	c := s.c
	ctx := context.Background()
	ensureModesNamespace(t, c)
	before := servingProcess(t, s.controller.endpoint)
	if before.pid != s.controller.cmd.Process.Pid {
		t.Fatalf("the controller's socket is served by process %d, not by the controller this test started (%d)", before.pid, s.controller.cmd.Process.Pid)
	}
	deps := c.client.AppsV1().Deployments(Namespace)
	dep, err := deps.Get(ctx, "proxy-topology-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The class comes first: its claim must fail while the Secret lacks
	// the connection, which proves the controller learns it later.
	const conn = "user-added"
	immediate := storagev1.VolumeBindingImmediate
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: conn},
		Provisioner:       driverName,
		VolumeBindingMode: &immediate,
		Parameters:        map[string]string{"connection": conn},
	}
	if _, err := c.client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.client.StorageV1().StorageClasses().Delete(context.Background(), conn, metav1.DeleteOptions{})
	})
	createClaim(t, c, "secret-first", conn)
	var failed string
	waitFor(t, "claim secret-first fails while the Secret lacks its connection", 60*time.Second, func() (bool, string) {
		s.provisioner.alive(t)
		failed = s.provisioningFailed(t, "secret-first", conn+".yaml")
		return failed != "", "no ProvisioningFailed event naming " + conn + ".yaml"
	})
	t.Logf("before the connection is added: %s", failed)

	// The user adds the connection to the Secret; the running controller
	// serves it.
	s.setConnection(t, conn, filepath.Join(s.base, conn), "zone1", "zone2")
	added := time.Now()
	_, pv := s.waitBound(t, "secret-first")
	t.Logf("claim secret-first Bound %s after the Secret edit", time.Since(added).Round(100*time.Millisecond))
	s.checkUserVolume(t, conn, pv.Name)
	s.sameController(t, before, "serving the added connection")

	// An upgrade: the manifests applied again over the running install.
	for _, o := range kustomizeBuild(t) {
		if _, err := c.apply(ctx, o, false); err != nil {
			t.Fatalf("re-applying %s: %v", key(o), err)
		}
	}
	after, err := deps.Get(ctx, "proxy-topology-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.Generation != dep.Generation {
		t.Errorf("re-applying the manifests changed the controller Deployment (generation %d -> %d): a cluster would restart the controller", dep.Generation, after.Generation)
	}
	sec, err := c.client.CoreV1().Secrets(Namespace).Get(ctx, "connections", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(sec.Data[conn+".yaml"], []byte(filepath.Join(s.base, conn))) {
		t.Fatalf("re-applying the manifests wiped the user's connection: Secret keys %v", keys(sec.Data))
	}
	createClaim(t, c, "secret-after-reapply", conn)
	_, pv2 := s.waitBound(t, "secret-after-reapply")
	s.checkUserVolume(t, conn, pv2.Name)
	s.sameController(t, before, "after the manifests were re-applied")

	for _, p := range []struct{ claim, pv string }{{"secret-first", pv.Name}, {"secret-after-reapply", pv2.Name}} {
		if err := c.client.CoreV1().PersistentVolumeClaims(modesNamespace).Delete(ctx, p.claim, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		s.waitPVGone(t, p.pv)
	}
}

// checkUserVolume: PV pv is a volume of connection conn, made under the
// connection's base path.
func (s *stack) checkUserVolume(t *testing.T, conn, pvName string) {
	t.Helper()
	pv, err := s.c.client.CoreV1().PersistentVolumes().Get(context.Background(), pvName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Spec.CSI == nil || !strings.HasPrefix(pv.Spec.CSI.VolumeHandle, "v:"+conn+"/") {
		t.Fatalf("PV %s is not a volume of connection %s: %+v", pv.Name, conn, pv.Spec.CSI)
	}
	// Recorded under the connection's base path (an empty volume's
	// directory is made at first use).
	if ok, err := recorded(s.volumeDir(t, conn, pv)); !ok {
		t.Errorf("PV %s: not a volume recorded under the connection's base path: %v", pv.Name, err)
	}
}

// sameController fails the test unless the process that serves the
// controller's socket now is the one identified by before.
func (s *stack) sameController(t *testing.T, before procIdentity, when string) {
	t.Helper()
	select {
	case <-s.controller.exited:
		t.Fatalf("%s: the controller exited (%v)", when, s.controller.cmd.ProcessState)
	default:
	}
	if now := servingProcess(t, s.controller.endpoint); now != before {
		t.Fatalf("%s: the controller's socket is served by process %+v, before by %+v: the controller was restarted", when, now, before)
	}
}
