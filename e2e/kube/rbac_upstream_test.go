package kube

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// grants are the (group, resource, verb) triples a ServiceAccount holds,
// cluster-wide (ClusterRoleBindings) and in its namespace (RoleBindings,
// which may also bind ClusterRoles).
type grants struct{ cluster, namespaced map[string]bool }

func triple(group, resource, verb string) string { return group + "/" + resource + ":" + verb }

func (g grants) allows(clusterScope bool, group, resource, verb string) bool {
	for _, gr := range []string{group, "*"} {
		for _, r := range []string{resource, "*"} {
			for _, v := range []string{verb, "*"} {
				k := triple(gr, r, v)
				if g.cluster[k] || !clusterScope && g.namespaced[k] {
					return true
				}
			}
		}
	}
	return false
}

// grantsOf collects what the rendered objects grant the ServiceAccount
// namespace/name.
func grantsOf(t *testing.T, objs []*unstructured.Unstructured, namespace, name string) grants {
	t.Helper()
	rules := map[string][]rbacv1.PolicyRule{} // "Kind/ns/name" of a role -> rules
	var bindings []struct {
		cluster bool
		role    string
	}
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRole", "Role":
			var r rbacv1.ClusterRole
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
				t.Fatal(err)
			}
			rules[key(o)] = r.Rules
		case "ClusterRoleBinding", "RoleBinding":
			var b rbacv1.RoleBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
				t.Fatal(err)
			}
			bound := slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
				return s.Kind == "ServiceAccount" && s.Namespace == namespace && s.Name == name
			})
			if !bound {
				continue
			}
			role := b.RoleRef.Kind + "/" + b.RoleRef.Name
			if b.RoleRef.Kind == "Role" {
				role = "Role/" + o.GetNamespace() + "/" + b.RoleRef.Name
			}
			bindings = append(bindings, struct {
				cluster bool
				role    string
			}{o.GetKind() == "ClusterRoleBinding", role})
		}
	}
	g := grants{cluster: map[string]bool{}, namespaced: map[string]bool{}}
	for _, b := range bindings {
		for _, r := range rules[b.role] {
			if len(r.ResourceNames) > 0 {
				continue // named objects only: not a general grant
			}
			for _, gr := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						if b.cluster {
							g.cluster[triple(gr, res, v)] = true
						} else {
							g.namespaced[triple(gr, res, v)] = true
						}
					}
				}
			}
		}
	}
	return g
}

// upstreamRBAC returns every (kind, group, resource, verb) that a
// sidecar module's RBAC file grants, each as "Kind verb group/resource",
// with whether it is cluster-wide (a ClusterRole) or namespaced (a Role).
func upstreamRBAC(t *testing.T, path string) []upstreamGrant {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []upstreamGrant
	for _, o := range decodeObjects(t, b) {
		if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
			continue
		}
		var r rbacv1.ClusterRole
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
			t.Fatal(err)
		}
		for _, rule := range r.Rules {
			for _, gr := range rule.APIGroups {
				for _, res := range rule.Resources {
					for _, v := range rule.Verbs {
						out = append(out, upstreamGrant{cluster: o.GetKind() == "ClusterRole", group: gr, resource: res, verb: v,
							text: fmt.Sprintf("%s %s %s/%s", o.GetKind(), v, gr, res)})
					}
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s grants nothing: the check would prove nothing", path)
	}
	return out
}

type upstreamGrant struct {
	cluster               bool
	group, resource, verb string
	text                  string
}

// sidecarRBACFiles are the RBAC files the sidecars' own modules ship.
func sidecarRBACFiles(t *testing.T) map[string]string {
	t.Helper()
	return map[string]string{
		"csi-provisioner": filepath.Join(snapshotModule(t, "github.com/kubernetes-csi/external-provisioner/v6"), "deploy", "kubernetes", "rbac.yaml"),
		"csi-resizer":     filepath.Join(snapshotModule(t, "github.com/kubernetes-csi/external-resizer/v2"), "deploy", "kubernetes", "rbac.yaml"),
		"csi-snapshotter": filepath.Join(snapshotModule(t, "github.com/kubernetes-csi/external-snapshotter/v8"), "deploy", "kubernetes", "csi-snapshotter", "rbac-csi-snapshotter.yaml"),
		"csi-attacher":    filepath.Join(snapshotModule(t, "github.com/kubernetes-csi/external-attacher/v4"), "deploy", "kubernetes", "rbac.yaml"),
	}
}

// TestSidecarRBACCoversUpstream: the ServiceAccount that runs each
// sidecar holds every permission the sidecar's own module grants it in its
// deploy/kubernetes RBAC file (its ClusterRole cluster-wide, its Role in
// the pod's namespace).
//
// controller: the controller Deployment's ServiceAccount, in
// deploy/kubernetes and in the chart with attachment on (which adds the
// attacher).
//
// node-local: in the node-local mode (deploy/node-local, and the chart's
// nodeLocal.enabled) the node ServiceAccount runs the DaemonSet's
// csi-provisioner and csi-snapshotter. Two of their grants are unneeded
// there, each allowed only while the DaemonSet's flags say so: leases
// (leader election) while the sidecar runs without --leader-election
// (one per node, nothing to elect); get on replicasets (the capacity
// owner of a Deployment's pod) while the provisioner runs with
// --capacity-ownerref-level=1, whose owner is the DaemonSet: get on
// daemonsets is then required instead.
func TestSidecarRBACCoversUpstream(t *testing.T) {
	need(t)
	files := sidecarRBACFiles(t)
	t.Run("controller", func(t *testing.T) {
		renderings := map[string][]*unstructured.Unstructured{
			"deploy/kubernetes":                    kustomizeBuild(t),
			"helm template (attachRequired: true)": helmTemplate(t, "--set", "csiDriver.attachRequired=true"),
		}
		for what, objs := range renderings {
			g := grantsOf(t, objs, Namespace, "proxy-topology-controller")
			for sidecar, path := range files {
				if sidecar == "csi-attacher" && what == "deploy/kubernetes" {
					continue // attachRequired: false there, no attacher
				}
				var missing []string
				for _, u := range upstreamRBAC(t, path) {
					if !g.allows(u.cluster, u.group, u.resource, u.verb) {
						missing = append(missing, u.text)
					}
				}
				sort.Strings(missing)
				if len(missing) > 0 {
					t.Errorf("%s: the controller lacks what %s's own RBAC grants: %v", what, sidecar, missing)
				}
			}
		}
	})
	t.Run("node-local", func(t *testing.T) {
		renderings := map[string][]*unstructured.Unstructured{
			"deploy/node-local":                 decodeObjects(t, run(t, tools["KUSTOMIZE"], "build", "deploy/node-local")),
			"helm template (nodeLocal.enabled)": helmTemplate(t, "--set", "nodeLocal.enabled=true", "--set", "controller.enabled=false"),
		}
		for what, objs := range renderings {
			var ds *unstructured.Unstructured
			for _, o := range objs {
				if o.GetKind() == "DaemonSet" {
					ds = o
				}
			}
			if ds == nil {
				t.Fatalf("%s renders no DaemonSet", what)
			}
			g := grantsOf(t, objs, Namespace, "proxy-topology-node")
			for _, sidecar := range []string{"csi-provisioner", "csi-snapshotter"} {
				args := strs(container(t, ds, sidecar)["args"])
				var missing, unneeded []string
				for _, u := range upstreamRBAC(t, files[sidecar]) {
					if g.allows(u.cluster, u.group, u.resource, u.verb) {
						continue
					}
					switch {
					case u.group == "coordination.k8s.io" && u.resource == "leases" && !hasFlag(args, "--leader-election"):
						unneeded = append(unneeded, u.text)
					case u.group == "apps" && u.resource == "replicasets" && u.verb == "get" && contains(args, "--capacity-ownerref-level=1"):
						unneeded = append(unneeded, u.text)
						if !g.allows(false, "apps", "daemonsets", "get") {
							missing = append(missing, "Role get apps/daemonsets (the capacity owner at --capacity-ownerref-level=1)")
						}
					default:
						missing = append(missing, u.text)
					}
				}
				sort.Strings(missing)
				if len(missing) > 0 {
					t.Errorf("%s: the node ServiceAccount lacks what %s's own RBAC grants: %v (args %v)", what, sidecar, missing, args)
				}
				t.Logf("%s: %s: not granted, unneeded by its flags: %v", what, sidecar, unneeded)
			}
		}
	})
}

// hasFlag says whether args set flag (--flag or --flag=value, but not
// --flag=false).
func hasFlag(args []string, flag string) bool {
	for _, a := range args {
		if a == flag || strings.HasPrefix(a, flag+"=") && a != flag+"=false" {
			return true
		}
	}
	return false
}
