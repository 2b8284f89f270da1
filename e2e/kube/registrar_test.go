package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// The node-driver-registrar and livenessprobe binaries: optional, as
// DEMOCRATIC_CSI is. The Go module proxy this project reaches refuses
// both modules (see notBuilt), so tools/csi cannot build them; built from
// their sources elsewhere as <name>-<version> (the image's tag), they are
// given here and their containers run.
const (
	registrarEnv = "CSI_NODE_DRIVER_REGISTRAR"
	livenessEnv  = "CSI_LIVENESSPROBE"
)

// kubeletSidecars maps the containers of the chart that are not built by
// tools/csi to the env var naming their binary.
var kubeletSidecars = map[string]string{"node-driver-registrar": registrarEnv, "liveness-probe": livenessEnv}

// optionalSidecar returns the binary the env var of container name
// gives, checked against the container's image tag, or "" when the var
// is unset.
func optionalSidecar(t *testing.T, r *podRun, name string) string {
	t.Helper()
	env := kubeletSidecars[name]
	bin := os.Getenv(env)
	if bin == "" {
		return ""
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s=%s: %v", env, bin, err)
	}
	ctr := r.container(t, name)
	if v := toolVersion(bin); !strings.HasSuffix(ctr.Image, ":"+v) {
		t.Fatalf("container %s runs %s; %s=%s is version %s", name, ctr.Image, env, bin, v)
	}
	return bin
}

// runNodeSidecars runs the node pod's registrar (for driver) and
// liveness probe whose binaries are given, after its proxy-topology has
// started, and returns the names of the containers it ran.
func runNodeSidecars(t *testing.T, r *podRun, driver string) []string {
	t.Helper()
	var ran []string
	if bin := optionalSidecar(t, r, "node-driver-registrar"); bin != "" {
		runRegistrar(t, r, bin, driver)
		ran = append(ran, "node-driver-registrar")
	}
	if bin := optionalSidecar(t, r, "liveness-probe"); bin != "" {
		runLivenessProbe(t, r, bin)
		ran = append(ran, "liveness-probe")
	}
	return ran
}

// runLivenessProbe runs the pod's liveness-probe container with its
// rendered args and waits until its /healthz answers 200, which it does
// only when proxy-topology answers Probe on the pod's socket. The
// rendered --http-endpoint (:9808 or :9809) is moved to a free 127.0.0.1
// port by podRun.args: both pods' network namespace is this machine's,
// where the rendered ports could clash with each other or anything else.
func runLivenessProbe(t *testing.T, r *podRun, bin string) {
	t.Helper()
	ctr := r.container(t, "liveness-probe")
	args := r.args(t, ctr)
	t.Logf("liveness-probe %s", strings.Join(args, " "))
	p := startContainer(t, "liveness-probe ("+r.pod.Name+")", bin, args, envList(r.env(t, ctr)))
	waitHealthz(t, p, flagValue(args, "--http-endpoint"))
}

// waitHealthz waits up to a minute for GET http://addr/healthz to answer
// 200 while p runs.
func waitHealthz(t *testing.T, p *process, addr string) {
	t.Helper()
	if addr == "" {
		t.Fatal("no --http-endpoint in the container's args")
	}
	url := "http://" + addr + "/healthz"
	client := &http.Client{Timeout: 5 * time.Second}
	waitFor(t, "GET "+url+" answers 200", time.Minute, func() (bool, string) {
		p.alive(t)
		status, body, err := httpGet(client, url)
		return err == nil && status == http.StatusOK, fmt.Sprintf("status %d, body %q, error %v", status, body, err)
	})
}

func httpGet(client *http.Client, url string) (int, string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b), err
}

// runRegistrar runs the node pod's node-driver-registrar with its
// rendered args and plays kubelet's plugin watcher through the real
// plugin-registration API: it dials the registration socket the
// registrar creates, checks GetInfo names driver as a CSI plugin whose
// endpoint is the proxy's socket as the host (kubelet) sees it, the
// socket-dir hostPath, and answers NotifyRegistrationStatus with success;
// the registrar's /healthz then answers 200. Writing CSINode, the rest of
// kubelet's registration, stays registerDriver's.
func runRegistrar(t *testing.T, r *podRun, bin, driver string) {
	t.Helper()
	ctr := r.container(t, "node-driver-registrar")
	regDir, ok := r.volumes["registration-dir"]
	if !ok {
		t.Fatal("the node pod has no registration-dir volume")
	}
	// The registrar creates <driver>-reg.sock in --plugin-registration-path,
	// which the chart leaves at its default, the registration-dir mount
	// path (/registration); here that is the volume's host directory, as
	// podRun.args does for paths given in flags.
	args := append(r.args(t, ctr), "--plugin-registration-path="+regDir)
	t.Logf("node-driver-registrar %s", strings.Join(args, " "))
	p := startContainer(t, "node-driver-registrar", bin, args, envList(r.env(t, ctr)))

	var socketDir string
	for _, v := range r.pod.Spec.Volumes {
		if v.Name == "socket-dir" && v.HostPath != nil {
			socketDir = v.HostPath.Path
		}
	}
	if socketDir == "" {
		t.Fatal("the node pod's socket-dir is not a hostPath volume: kubelet could not reach the proxy's socket")
	}
	wantEndpoint := filepath.Join(socketDir, "csi.sock")
	if got := flagValue(ctr.Args, "--kubelet-registration-path"); got != wantEndpoint {
		t.Errorf("--kubelet-registration-path=%s, want the socket-dir hostPath's socket %s", got, wantEndpoint)
	}

	sock := filepath.Join(regDir, driver+"-reg.sock")
	waitFor(t, "the registrar's registration socket "+sock, time.Minute, func() (bool, string) {
		p.alive(t)
		fi, err := os.Stat(sock)
		return err == nil && fi.Mode().Type() == os.ModeSocket, fmt.Sprintf("%v", err)
	})
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg := registerapi.NewRegistrationClient(conn)
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("registrar GetInfo: %v", err)
	}
	if err := checkPluginInfo(info, driver, wantEndpoint); err != nil {
		t.Fatal(err)
	}
	t.Logf("registrar GetInfo: type %s, name %s, endpoint %s, versions %v", info.Type, info.Name, info.Endpoint, info.SupportedVersions)
	if _, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatalf("registrar NotifyRegistrationStatus: %v", err)
	}
	waitHealthz(t, p, flagValue(args, "--http-endpoint"))
}

// checkPluginInfo checks the registrar's GetInfo answer as kubelet's CSI
// plugin handler would, against the chart's driver name and socket.
func checkPluginInfo(info *registerapi.PluginInfo, driver, endpoint string) error {
	var errs []error
	if info.Type != registerapi.CSIPlugin {
		errs = append(errs, fmt.Errorf("type %q, want %q", info.Type, registerapi.CSIPlugin))
	}
	if info.Name != driver {
		errs = append(errs, fmt.Errorf("name %q, want the chart's driver %q", info.Name, driver))
	}
	if info.Endpoint != endpoint {
		errs = append(errs, fmt.Errorf("endpoint %q, want %q", info.Endpoint, endpoint))
	}
	// kubelet's CSI handler accepts plugins that support CSI 1.x.
	if !slices.ContainsFunc(info.SupportedVersions, func(v string) bool { return strings.HasPrefix(v, "1.") }) {
		errs = append(errs, fmt.Errorf("supported versions %v name no CSI 1.x", info.SupportedVersions))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("registrar GetInfo: %w", err)
	}
	return nil
}
