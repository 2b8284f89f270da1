package kube

import (
	"bytes"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// migrateTestdata holds democratic-csi's example proxy values and the
// local-hostpath, NFS and iSCSI connections of internal/migrate's tests.
const migrateTestdata = "internal/migrate/testdata"

// democraticProxyEnv names a democratic-csi source tree of its proxy
// driver with topology (commit bb0e3c3) with its node_modules.
const democraticProxyEnv = "DEMOCRATIC_CSI_PROXY"

// democraticProxyTree is DEMOCRATIC_CSI_PROXY, or DEMOCRATIC_CSI when that
// tree has the proxy driver (a checkout of the proxy's branch); empty,
// with the reason, when neither has it.
func democraticProxyTree(t *testing.T) (tree, why string) {
	t.Helper()
	has := func(dir string) bool {
		_, err := os.Stat(filepath.Join(dir, "src", "driver", "controller-proxy", "index.js"))
		return err == nil
	}
	if dir := os.Getenv(democraticProxyEnv); dir != "" {
		if !has(dir) {
			t.Fatalf("%s=%s: no src/driver/controller-proxy (democratic-csi's proxy driver, commit bb0e3c3)", democraticProxyEnv, dir)
		}
		if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
			t.Fatalf("%s=%s: no node_modules (npm ci --omit=dev in it): %v", democraticProxyEnv, dir, err)
		}
		return dir, ""
	}
	if dir := os.Getenv(democraticEnv); dir != "" && has(dir) {
		return dir, ""
	}
	return "", democraticProxyEnv + " is not set (and " + democraticEnv + " has no src/driver/controller-proxy): set it to democratic-csi's source tree of its proxy driver with topology (commit bb0e3c3) with node_modules"
}

// runMigrate runs `proxy-topology migrate args` and returns its stdout,
// stderr and exit code.
func runMigrate(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"migrate"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

// renderedConfig writes the main config and the connection files of
// rendered objects into dir, as the pods see them, and returns the main
// config's path and the connections folder.
func renderedConfig(t *testing.T, objs []*unstructured.Unstructured, dir string) (string, string) {
	t.Helper()
	conns := filepath.Join(dir, "connections")
	if err := os.MkdirAll(conns, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := ""
	for _, o := range objs {
		switch {
		case o.GetKind() == "ConfigMap" && strings.HasSuffix(o.GetName(), "-config"):
			text, _, _ := unstructured.NestedString(o.Object, "data", "proxy.yaml")
			cfg = filepath.Join(dir, "proxy.yaml")
			if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
		case o.GetKind() == "Secret" && o.GetName() == "connections":
			data, _, _ := unstructured.NestedStringMap(o.Object, "data")
			for k, v := range data {
				b, err := base64.StdEncoding.DecodeString(v)
				if err != nil {
					t.Fatalf("Secret connections: %s: %v", k, err)
				}
				if err := os.WriteFile(filepath.Join(conns, k), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if cfg == "" {
		t.Fatal("the chart rendered no ConfigMap with proxy.yaml")
	}
	return cfg, conns
}

// TestMigrateRender (issue 39): `proxy-topology migrate` on democratic-csi's
// example proxy values (its docs' Helm values with examples/proxy.yaml as
// driver.config; the file itself from DEMOCRATIC_CSI_PROXY when set) and a
// connections folder with a local-hostpath, an NFS and an iSCSI
// connection writes values that the real helm renders, with each
// connection's container, the node-local mode for local-hostpath, the
// driver name unchanged; `proxy-topology check` passes on the rendered
// main config and connections. An incompatible driver is refused by name,
// with nothing written.
func TestMigrateRender(t *testing.T) {
	need(t)
	dir := t.TempDir()
	values := filepath.Join(repoRoot, migrateTestdata, "values.yaml")
	if tree, why := democraticProxyTree(t); tree != "" {
		example, err := os.ReadFile(filepath.Join(tree, "examples", "proxy.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var cfg map[string]any
		if err := yaml.Unmarshal(example, &cfg); err != nil {
			t.Fatalf("%s/examples/proxy.yaml: %v", tree, err)
		}
		var v map[string]any
		b, err := os.ReadFile(values)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		v["driver"] = map[string]any{"config": cfg}
		if b, err = yaml.Marshal(v); err != nil {
			t.Fatal(err)
		}
		values = filepath.Join(dir, "values.yaml")
		if err := os.WriteFile(values, b, 0o600); err != nil {
			t.Fatal(err)
		}
		t.Logf("driver.config is %s/examples/proxy.yaml", tree)
	} else {
		t.Logf("driver.config is %s's copy of democratic-csi's example (%s)", migrateTestdata, why)
	}
	conns := filepath.Join(repoRoot, migrateTestdata, "connections")
	out, notes, code := runMigrate(t, "--values", values, "--connections", conns)
	if code != 0 {
		t.Fatalf("migrate exited %d:\n%s", code, notes)
	}
	t.Logf("migrate's notes:\n%s", notes)
	written := filepath.Join(dir, "migrated.yaml")
	if err := os.WriteFile(written, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	objs := helmTemplate(t, "--values", written)
	byK := byKey(objs)
	if _, ok := byK["CSIDriver/org.democratic-csi.proxy-topology"]; !ok {
		t.Errorf("no CSIDriver org.democratic-csi.proxy-topology (the name of democratic-csi's values); rendered %v", keys(byK))
	}
	ds, ok := byK["DaemonSet/"+Namespace+"/proxy-topology-node"]
	if !ok {
		t.Fatalf("no node DaemonSet; rendered %v", keys(byK))
	}
	if _, ok := byK["Deployment/"+Namespace+"/proxy-topology-controller"]; ok {
		t.Error("a controller Deployment is rendered: the local-hostpath connection needs the node-local mode")
	}
	containers, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	names := map[string]string{}
	for _, c := range containers {
		m := c.(map[string]any)
		names[m["name"].(string)] = m["image"].(string)
	}
	for _, up := range []string{"local", "nfs-zone1", "iscsi"} {
		if img := names["upstream-"+up]; !strings.HasPrefix(img, dcsiImage) {
			t.Errorf("node pod: container upstream-%s runs %q, not democratic-csi's image; containers %v", up, img, names)
		}
	}
	cfg, folder := renderedConfig(t, objs, dir)
	check := exec.Command(binary, "check", "--config", cfg, "--connections-folder", folder)
	report, err := check.CombinedOutput()
	if err != nil {
		t.Fatalf("proxy-topology check on the rendered config: %v\n%s", err, report)
	}
	t.Logf("check on the rendered connections:\n%s", report)
	// Warnings pass: democratic-csi's example reports no zone (type
	// cluster), which check says of the zonal connections.
	for _, want := range []string{"proxy.yaml: ok", "local.yaml: ok", "iscsi.yaml: ", "nfs-zone1.yaml: ", "checked 4 files", "0 with errors"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("check's report lacks %q", want)
		}
	}

	// An incompatible driver beside them: refused by name, nothing written.
	bad := filepath.Join(dir, "with-objectivefs")
	if err := os.MkdirAll(bad, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"local.yaml", "nfs-zone1.yaml", "iscsi.yaml"} {
		b, err := os.ReadFile(filepath.Join(conns, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bad, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(bad, "ofs.yaml"), []byte("driver: objectivefs\nobjectivefs: {pool: p}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, notes, code = runMigrate(t, "--values", values, "--connections", bad)
	if code != 1 || out != "" || !strings.Contains(notes, "connection ofs: driver objectivefs cannot run as an upstream") {
		t.Errorf("an objectivefs connection: exit %d, stdout %q, stderr:\n%s", code, out, notes)
	}
}
