package kube

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// sidecarModules maps each kubernetes-csi image to the module of
// tools/csi it is built from; notBuilt are the sidecars the manifests ship
// that cannot be built here: the Go module proxy this project reaches
// answers 403 ("This module version is not available") for
// github.com/kubernetes-csi/node-driver-registrar/v2 and
// github.com/kubernetes-csi/livenessprobe/v2 (and their paths without
// /v2), for the version list and for v2.14.0 and v2.16.0 alike, checked
// on 2026-11-25 and again on 2026-11-28. Their tags are pinned in deploy/
// by hand; TestUpstreamsInPods runs them only when CSI_NODE_DRIVER_REGISTRAR
// and CSI_LIVENESSPROBE name binaries built elsewhere (make e2e-kube takes
// the ones put in .cache/bin by default), and checks that each
// binary's version suffix is its image's tag (registrar_test.go).
var (
	sidecarModules = map[string]string{
		"csi-provisioner":     "github.com/kubernetes-csi/external-provisioner/v6",
		"csi-attacher":        "github.com/kubernetes-csi/external-attacher/v4",
		"csi-resizer":         "github.com/kubernetes-csi/external-resizer/v2",
		"csi-snapshotter":     "github.com/kubernetes-csi/external-snapshotter/v8",
		"snapshot-controller": "github.com/kubernetes-csi/external-snapshotter/v8",
	}
	notBuilt = []string{"livenessprobe", "csi-node-driver-registrar"}
	// upstreamImages are CSI drivers of deploy/ (the overlay
	// deploy/upstream-nfs runs one beside the proxy), not sidecars: no
	// test runs them, and their tags are the overlay's choice.
	upstreamImages = []string{"nfsplugin"}
)

var sigStorageImage = regexp.MustCompile(`registry\.k8s\.io/sig-storage/([a-z0-9-]+):([A-Za-z0-9._-]+)`)

// toolsModuleVersions reads the required versions of a tools module's
// go.mod (the Makefile's source of truth, read the same way).
func toolsModuleVersions(t *testing.T, module string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "tools", module, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] != "//" && strings.HasPrefix(f[1], "v") {
			out[f[0]] = f[1]
		}
	}
	return out
}

// TestSidecarImageVersions: every kubernetes-csi sidecar image that
// deploy/ names (manifests, chart values and templates, operator object),
// and every one that kustomize and helm render, has the tag of the
// version built in tools/csi and run by these tests. A sidecar nobody
// builds here fails the test too, unless listed in notBuilt.
func TestSidecarImageVersions(t *testing.T) {
	need(t)
	built := toolsModuleVersions(t, "csi")
	for img, mod := range sidecarModules {
		if built[mod] == "" {
			t.Fatalf("tools/csi/go.mod does not require %s (the module of %s)", mod, img)
		}
	}
	// The binaries the tests run are the ones go.mod names.
	for tool, img := range map[string]string{
		"CSI_PROVISIONER": "csi-provisioner", "CSI_RESIZER": "csi-resizer", "CSI_ATTACHER": "csi-attacher",
		"CSI_SNAPSHOTTER": "csi-snapshotter", "SNAPSHOT_CONTROLLER": "snapshot-controller",
	} {
		if v, want := toolVersion(tools[tool]), built[sidecarModules[img]]; v != want {
			t.Errorf("%s=%s is not the version tools/csi/go.mod requires (%s)", tool, tools[tool], want)
		}
	}
	check := func(where, ref string) {
		m := sigStorageImage.FindStringSubmatch(ref)
		if m == nil {
			return
		}
		name, tag := m[1], m[2]
		if mod, ok := sidecarModules[name]; ok {
			if tag != built[mod] {
				t.Errorf("%s: %s has tag %s; tools/csi builds and tests %s %s", where, name, tag, mod, built[mod])
			}
			return
		}
		if !slices.Contains(notBuilt, name) && !slices.Contains(upstreamImages, name) {
			t.Errorf("%s: %s is not built by tools/csi (add it there, or to notBuilt)", where, ref)
		}
	}
	n := 0
	err := filepath.WalkDir(filepath.Join(repoRoot, "deploy"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, ".go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		for _, ref := range sigStorageImage.FindAllString(string(b), -1) {
			n++
			check(rel, ref)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("deploy/ names no registry.k8s.io/sig-storage image")
	}
	rendered := map[string][]*unstructured.Unstructured{
		"kustomize build deploy/kubernetes":      kustomizeBuild(t),
		"helm template (default values)":         helmTemplate(t),
		"helm template (connections and extras)": helmTemplate(t, "--values", writeExtraValues(t)),
	}
	seen := map[string]bool{}
	for what, objs := range rendered {
		for _, o := range objs {
			for _, field := range []string{"containers", "initContainers"} {
				cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", field)
				for _, c := range cs {
					img, _ := c.(map[string]any)["image"].(string)
					if m := sigStorageImage.FindStringSubmatch(img); m != nil {
						seen[m[1]] = true
					}
					check(what+" "+key(o), img)
				}
			}
		}
	}
	// The provisioner at least is rendered, so the check above ran.
	if !seen["csi-provisioner"] {
		t.Errorf("no rendering has a csi-provisioner container: %v", seen)
	}
}
