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

// checkUpstreamWiring checks one pod's wiring of upstream name (SPEC §14):
// a container upstream-<name> with CSI_ENDPOINT=unix:///csi/csi.sock and
// NODE_NAME from spec.nodeName, an emptyDir mounted at /csi in it and at
// /csi/upstreams/<name> in proxy-topology's container and nowhere else;
// on the node side privileged, with the kubelet directory (Bidirectional)
// and the host's /dev.
func checkUpstreamWiring(t *testing.T, where string, spec corev1.PodSpec, name string, node bool) {
	t.Helper()
	up := container(t, spec, "upstream-"+name)
	proxy := container(t, spec, "proxy-topology")
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	plain, fields := env(up)
	if !containsString(plain, "CSI_ENDPOINT=unix:///csi/csi.sock") || fields["NODE_NAME"] != "spec.nodeName" {
		t.Errorf("%s: upstream-%s env %v %v: want CSI_ENDPOINT=unix:///csi/csi.sock and NODE_NAME from spec.nodeName", where, name, plain, fields)
	}
	var sock string
	for _, m := range up.VolumeMounts {
		if m.MountPath == "/csi" {
			sock = m.Name
		}
	}
	if v, ok := vols[sock]; !ok || v.EmptyDir == nil {
		t.Fatalf("%s: upstream-%s has no emptyDir at /csi (mounts %+v)", where, name, up.VolumeMounts)
	}
	if m, ok := mountPath(proxy, sock); !ok || strings.TrimSuffix(m.MountPath, "/") != "/csi/upstreams/"+name {
		t.Errorf("%s: proxy-topology mounts %s at %q, want /csi/upstreams/%s", where, sock, m.MountPath, name)
	}
	for _, c := range spec.Containers {
		if _, ok := mountPath(c, sock); ok && c.Name != proxy.Name && c.Name != up.Name {
			t.Errorf("%s: %s mounts the socket directory of upstream %s", where, c.Name, name)
		}
	}
	if !node {
		return
	}
	if sc := up.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Errorf("%s: upstream-%s is not privileged", where, name)
	}
	kubelet, ok := mountPath(up, "kubelet-dir")
	if !ok || kubelet.MountPropagation == nil || *kubelet.MountPropagation != corev1.MountPropagationBidirectional {
		t.Errorf("%s: upstream-%s: no kubelet-dir with Bidirectional propagation: %+v", where, name, kubelet)
	}
	if v := vols["kubelet-dir"]; v.HostPath == nil || v.HostPath.Path != kubelet.MountPath {
		t.Errorf("%s: kubelet-dir is %+v, mounted at %s", where, v.VolumeSource, kubelet.MountPath)
	}
	var dev bool
	for _, m := range up.VolumeMounts {
		if v := vols[m.Name]; m.MountPath == "/dev" && v.HostPath != nil && v.HostPath.Path == "/dev" {
			dev = true
		}
	}
	if !dev {
		t.Errorf("%s: upstream-%s does not mount the host's /dev", where, name)
	}
}

func containsString(l []string, s string) bool {
	for _, e := range l {
		if e == s {
			return true
		}
	}
	return false
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
	if c.Driver != "csi" || c.CSI.Endpoint != "unix:///csi/upstreams/nfs/csi.sock" {
		t.Errorf("the documented connection is driver %q endpoint %q, want csi on unix:///csi/upstreams/nfs/csi.sock", c.Driver, c.CSI.Endpoint)
	}
}
