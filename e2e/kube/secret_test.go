package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// applyWithin is how fast a Secret change must reach the controller.
const applyWithin = 5 * time.Second

// TestControllerConnectionsSecret runs a controller configured exactly like
// the deployed Deployment's proxy container (the ConfigMap's config plus
// the container's env, which switch it to proxy.configSecret) with the
// controller ServiceAccount's token, and changes the connections Secret
// under it: a new key serves within seconds, a broken key fails only its
// own connection, a fixed key recovers, a removed key is gone.
func TestControllerConnectionsSecret(t *testing.T) {
	c := deployed(t)
	ctx := context.Background()
	secrets := c.client.CoreV1().Secrets(Namespace)
	// Start from an empty Secret (deploy/kubernetes ships none).
	editConnections(t, c, func(data map[string][]byte) {
		for k := range data {
			delete(data, k)
		}
	})

	// Its keys go when it ends: node pods of later tests mount the Secret,
	// and a node-local connection among them adds <prefix>/node to what
	// they report.
	t.Cleanup(func() {
		editConnections(t, c, func(data map[string][]byte) {
			for _, k := range []string{"alpha.yaml", "beta.yaml", "gamma.yaml"} {
				delete(data, k)
			}
		})
	})

	// Made before the controller starts, so removed after it stops: a
	// running controller would make its connections' directories again.
	base := t.TempDir()
	env := containerEnv(t, "proxy-topology-controller", "proxy-topology")
	if !contains(env, "PROXY_TOPOLOGY_SET_PROXY__CONFIGSECRET="+Namespace+"/connections") {
		t.Fatalf("the Deployment does not switch the controller to the Secret: env %v", env)
	}
	p := startPlugin(t, "controller", env, "--mode=controller", "--config="+deployedConfig(t, nil),
		"--kubeconfig="+c.kubeconfig(t, c.token(t, Namespace, "proxy-topology-controller")))
	p.ready(t)
	if logs := p.logs.String(); !strings.Contains(logs, "source=\"secret proxy-topology/connections\"") {
		t.Errorf("the controller does not say it serves the Secret:\n%s", logs)
	}
	ctrl := csi.NewControllerClient(p.conn)
	n := 0
	create := func(conn string) error {
		n++
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := ctrl.CreateVolume(cctx, &csi.CreateVolumeRequest{
			Name:          fmt.Sprintf("pvc-%s-%d", conn, n),
			CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20},
			VolumeCapabilities: []*csi.VolumeCapability{{
				AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
				AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
			}},
			Parameters: map[string]string{"connection": conn},
		})
		return err
	}
	local := func(name string) []byte {
		return []byte("driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: " + filepath.Join(base, name) + "\n")
	}
	data := map[string][]byte{}
	update := func() time.Time {
		t.Helper()
		s, err := secrets.Get(ctx, "connections", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Data = data
		if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return time.Now()
	}
	// within polls until check passes, and fails if that takes longer
	// than applyWithin after the update.
	within := func(what string, since time.Time, check func() error) {
		t.Helper()
		for {
			err := check()
			if err == nil {
				t.Logf("%s after %s", what, time.Since(since).Round(time.Millisecond))
				return
			}
			if time.Since(since) > applyWithin {
				t.Fatalf("%s: not within %s: %v", what, applyWithin, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	wantCode := func(conn string, code codes.Code, msg ...string) func() error {
		return func() error {
			err := create(conn)
			if status.Code(err) != code {
				return fmt.Errorf("CreateVolume on %s: %v, want %s", conn, err, code)
			}
			for _, m := range msg {
				if !strings.Contains(status.Convert(err).Message(), m) {
					return fmt.Errorf("CreateVolume on %s: %v, want a message with %q", conn, err, m)
				}
			}
			return nil
		}
	}

	// Nothing yet: the message names the Secret key to add.
	if err := wantCode("alpha", codes.FailedPrecondition, "secret proxy-topology/connections key alpha.yaml")(); err != nil {
		t.Fatal(err)
	}

	data["alpha.yaml"] = local("alpha")
	within("a new connection serves", update(), wantCode("alpha", codes.OK))

	data["beta.yaml"] = []byte("driver: local-hostpath\nlocal-hostpath: [not, a, mapping\n")
	data["gamma.yaml"] = local("gamma")
	at := update()
	within("the key added with a broken one serves", at, wantCode("gamma", codes.OK))
	within("a broken key fails its own connection", at, wantCode("beta", codes.FailedPrecondition, "secret proxy-topology/connections key beta.yaml", "yaml"))
	if err := wantCode("alpha", codes.OK)(); err != nil {
		t.Errorf("the broken key broke another connection: %v", err)
	}

	data["beta.yaml"] = local("beta")
	within("a fixed key serves", update(), wantCode("beta", codes.OK))

	delete(data, "alpha.yaml")
	within("a removed key is gone", update(), wantCode("alpha", codes.FailedPrecondition, "has no file secret proxy-topology/connections key alpha.yaml"))
	if err := wantCode("gamma", codes.OK)(); err != nil {
		t.Error(err)
	}

	// The volumes were made where the connections say.
	for _, name := range []string{"alpha", "beta", "gamma"} {
		if entries, err := os.ReadDir(filepath.Join(base, name)); err != nil || len(entries) == 0 {
			t.Errorf("connection %s created nothing under its base path: %v", name, err)
		}
	}
}
