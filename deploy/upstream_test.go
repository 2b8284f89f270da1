package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/democratic-csi/proxy-topology/internal/deploycheck"
	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/config"
)

// loadOverlay builds an overlay of deploy/ with kustomize's own library
// and decodes its objects strictly, as load does the base.
func loadOverlay(t *testing.T, dir string) *manifests {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build deploy/%s: %v", dir, err)
	}
	m := newManifests()
	for _, r := range res.Resources() {
		data, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		m.addDocs(t, dir+"/"+r.CurId().String(), data)
	}
	return m
}

// checkUpstreamWiring fails t with what deploycheck.UpstreamWiring finds.
func checkUpstreamWiring(t *testing.T, where string, spec corev1.PodSpec, name string, node bool) {
	t.Helper()
	for _, p := range deploycheck.UpstreamWiring(spec, name, node) {
		t.Errorf("%s: %s", where, p)
	}
}

// TestUpstreamOverlay: deploy/upstream-nfs as kustomize builds it wires
// the NFS driver into both pods as the chart does for an upstream
// (checkUpstreamWiring), keeps the base's containers, makes the node pod
// use the host network (what the node plugin asks for, pod-wide), adds a
// class of connection nfs, and the connection file its kustomization.yaml
// tells the user to add loads, with the socket the pods share.
func TestUpstreamOverlay(t *testing.T) {
	base, m := load(t), loadOverlay(t, "upstream-nfs")
	if m.ctrl == nil || m.node == nil {
		t.Fatalf("deploy/upstream-nfs lacks the Deployment or the DaemonSet: %v", keys(m.byKind))
	}
	checkUpstreamWiring(t, "controller", m.ctrl.Spec.Template.Spec, "nfs", false)
	checkUpstreamWiring(t, "node", m.node.Spec.Template.Spec, "nfs", true)
	for _, w := range []struct {
		name       string
		base, with corev1.PodSpec
	}{
		{"controller", base.ctrl.Spec.Template.Spec, m.ctrl.Spec.Template.Spec},
		{"node", base.node.Spec.Template.Spec, m.node.Spec.Template.Spec},
	} {
		if len(w.with.Containers) != len(w.base.Containers)+1 {
			t.Errorf("%s: %d containers, want the base's %d and the upstream", w.name, len(w.with.Containers), len(w.base.Containers))
		}
		for _, c := range w.base.Containers {
			got := container(t, w.with, c.Name)
			if c.Image != got.Image || strings.Join(c.Args, " ") != strings.Join(got.Args, " ") {
				t.Errorf("%s/%s changed: %s %v", w.name, c.Name, got.Image, got.Args)
			}
		}
	}
	if n := m.node.Spec.Template.Spec; !n.HostNetwork || n.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("node pod: hostNetwork %v dnsPolicy %q, want true and ClusterFirstWithHostNet", n.HostNetwork, n.DNSPolicy)
	}
	if m.ctrl.Spec.Template.Spec.HostNetwork {
		t.Error("the controller pod uses the host network; only the node side asks for it")
	}
	var class bool
	for _, sc := range m.classes {
		class = class || sc.Name == "proxy-topology-nfs" && sc.Parameters["connection"] == "nfs"
	}
	if !class {
		t.Error("no StorageClass proxy-topology-nfs of connection nfs")
	}

	// The connection file of the kustomization's comment.
	k, err := os.ReadFile(filepath.Join("upstream-nfs", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(`(?m)^#   nfs\.yaml: \|\n((?:#     .*\n)+)`).FindSubmatch(k)
	if block == nil {
		t.Fatal("kustomization.yaml shows no nfs.yaml connection")
	}
	file := regexp.MustCompile(`(?m)^#     `).ReplaceAll(block[1], nil)
	c, warnings, err := config.ParseConnection("nfs.yaml", file, accessible.Options{})
	if err != nil || len(warnings) > 0 {
		t.Fatalf("the documented connection: %v %q\n%s", err, warnings, file)
	}
	if c.Driver != "csi" || c.CSI.Endpoint != deploycheck.UpstreamEndpoint("nfs") {
		t.Errorf("the documented connection is driver %q endpoint %q, want csi on unix:///csi/upstreams/nfs/csi.sock", c.Driver, c.CSI.Endpoint)
	}
}
