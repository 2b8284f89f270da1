package kube

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
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

// TestSidecarRBACCoversUpstream: the controller's ServiceAccount holds
// every permission that each sidecar's own module grants it in its
// deploy/kubernetes RBAC file (its ClusterRole cluster-wide, its Role in
// the controller's namespace), in deploy/kubernetes and in the chart with
// attachment on (which adds the attacher).
func TestSidecarRBACCoversUpstream(t *testing.T) {
	need(t)
	files := map[string]string{
		"csi-provisioner": filepath.Join(snapshotModule(t, "github.com/kubernetes-csi/external-provisioner/v6"), "deploy", "kubernetes", "rbac.yaml"),
		"csi-resizer":     filepath.Join(snapshotModule(t, "github.com/kubernetes-csi/external-resizer/v2"), "deploy", "kubernetes", "rbac.yaml"),
		"csi-snapshotter": filepath.Join(snapshotModule(t, "github.com/kubernetes-csi/external-snapshotter/v8"), "deploy", "kubernetes", "csi-snapshotter", "rbac-csi-snapshotter.yaml"),
		"csi-attacher":    filepath.Join(snapshotModule(t, "github.com/kubernetes-csi/external-attacher/v4"), "deploy", "kubernetes", "rbac.yaml"),
	}
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
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var missing []string
			n := 0
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
								n++
								if !g.allows(o.GetKind() == "ClusterRole", gr, res, v) {
									missing = append(missing, fmt.Sprintf("%s %s %s/%s", o.GetKind(), v, gr, res))
								}
							}
						}
					}
				}
			}
			if n == 0 {
				t.Errorf("%s: %s grants nothing: the check would prove nothing", sidecar, path)
			}
			sort.Strings(missing)
			if len(missing) > 0 {
				t.Errorf("%s: the controller lacks what %s's own RBAC grants: %v", what, sidecar, missing)
			}
		}
	}
}
