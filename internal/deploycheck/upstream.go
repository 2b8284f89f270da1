// Package deploycheck holds checks of rendered deployments shared by the
// tests of deploy/ (the manifests, built with kustomize's library) and of
// e2e/kube (the Helm chart, rendered by helm): one statement of what the
// pods of a deployment must look like, whoever rendered them.
package deploycheck

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// UpstreamSocketDir is where an upstream's container finds its own
// socket directory (SPEC §14): unix:///csi/csi.sock, the kubernetes-csi
// convention.
const UpstreamSocketDir = "/csi"

// UpstreamEndpoint is the socket of upstream name as proxy-topology's
// container sees it, the csi.endpoint of its connection.
func UpstreamEndpoint(name string) string {
	return "unix://" + UpstreamSocketDir + "/upstreams/" + name + "/csi.sock"
}

// UpstreamWiring returns what is wrong with one pod's wiring of upstream
// name (SPEC §14), nothing when it is right: a container upstream-<name>
// with CSI_ENDPOINT=unix:///csi/csi.sock and NODE_NAME from spec.nodeName,
// an emptyDir mounted at /csi in it and at /csi/upstreams/<name> in
// proxy-topology's container and in no other; on the node side
// privileged, with the kubelet directory (a hostPath, Bidirectional) and
// the host's /dev.
func UpstreamWiring(spec corev1.PodSpec, name string, node bool) []string {
	var out []string
	bad := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }
	up, proxy := findContainer(spec, "upstream-"+name), findContainer(spec, "proxy-topology")
	if up == nil || proxy == nil {
		return []string{fmt.Sprintf("no container upstream-%s or proxy-topology", name)}
	}
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	env := map[string]string{}
	for _, e := range up.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			env[e.Name] = "fieldRef:" + e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["CSI_ENDPOINT"] != "unix://"+UpstreamSocketDir+"/csi.sock" || env["NODE_NAME"] != "fieldRef:spec.nodeName" {
		bad("upstream-%s env %v: want CSI_ENDPOINT=unix:///csi/csi.sock and NODE_NAME from spec.nodeName", name, env)
	}
	sock := ""
	for _, m := range up.VolumeMounts {
		if strings.TrimSuffix(m.MountPath, "/") == UpstreamSocketDir {
			sock = m.Name
		}
	}
	if v, ok := vols[sock]; !ok || v.EmptyDir == nil {
		return append(out, fmt.Sprintf("upstream-%s has no emptyDir at %s (mounts %+v)", name, UpstreamSocketDir, up.VolumeMounts))
	}
	want := UpstreamSocketDir + "/upstreams/" + name
	if m := findMount(*proxy, sock); m == nil || strings.TrimSuffix(m.MountPath, "/") != want {
		bad("proxy-topology does not mount %s at %s: %+v", sock, want, proxy.VolumeMounts)
	}
	for _, c := range spec.Containers {
		if c.Name != proxy.Name && c.Name != up.Name && findMount(c, sock) != nil {
			bad("%s mounts the socket directory of upstream %s", c.Name, name)
		}
	}
	if !node {
		return out
	}
	if sc := up.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		bad("upstream-%s is not privileged", name)
	}
	kubelet := findMount(*up, "kubelet-dir")
	switch {
	case kubelet == nil || kubelet.MountPropagation == nil || *kubelet.MountPropagation != corev1.MountPropagationBidirectional:
		bad("upstream-%s: no kubelet-dir with Bidirectional propagation: %+v", name, kubelet)
	case vols["kubelet-dir"].HostPath == nil || vols["kubelet-dir"].HostPath.Path != kubelet.MountPath:
		bad("kubelet-dir is %+v, mounted at %s", vols["kubelet-dir"].VolumeSource, kubelet.MountPath)
	}
	dev := false
	for _, m := range up.VolumeMounts {
		if v := vols[m.Name]; m.MountPath == "/dev" && v.HostPath != nil && v.HostPath.Path == "/dev" {
			dev = true
		}
	}
	if !dev {
		bad("upstream-%s does not mount the host's /dev", name)
	}
	return out
}

func findContainer(spec corev1.PodSpec, name string) *corev1.Container {
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i]
		}
	}
	return nil
}

func findMount(c corev1.Container, volume string) *corev1.VolumeMount {
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].Name == volume {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}
