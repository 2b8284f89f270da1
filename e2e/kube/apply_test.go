package kube

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

// Namespace is where deploy/kubernetes installs everything.
const Namespace = "proxy-topology"

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// decodeObjects splits a multi-document YAML stream into objects; empty
// documents (helm leaves some) are dropped.
func decodeObjects(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("decoding YAML: %v", err)
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

func run(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	cmd := command(t, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// command is name with args, to run in the repository's root with a home
// of its own: helm must not touch the user's config or cache.
func command(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = repoRoot
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CACHE_HOME="+home, "XDG_CONFIG_HOME="+home, "XDG_DATA_HOME="+home)
	return cmd
}

// kustomizeBuild renders deploy/kubernetes as `kubectl apply -k` would.
func kustomizeBuild(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	return decodeObjects(t, run(t, tools["KUSTOMIZE"], "build", "deploy/kubernetes"))
}

// helmTemplate renders the chart as release proxy-topology in the
// proxy-topology namespace, with extra helm flags.
func helmTemplate(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	return decodeObjects(t, helmTemplateRaw(t, args...))
}

func helmTemplateRaw(t *testing.T, args ...string) []byte {
	t.Helper()
	return run(t, tools["HELM"], append([]string{"template", "proxy-topology", "deploy/helm/proxy-topology", "--namespace", Namespace}, args...)...)
}

func key(o *unstructured.Unstructured) string {
	if ns := o.GetNamespace(); ns != "" {
		return o.GetKind() + "/" + ns + "/" + o.GetName()
	}
	return o.GetKind() + "/" + o.GetName()
}

// resource finds the dynamic client for o's kind.
func (c *cluster) resource(o *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		// A kind the cached discovery has not seen (a CRD just created).
		c.mapper.Reset()
		if m, err = c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			return nil, err
		}
	}
	if m.Scope.Name() == "namespace" {
		return c.dyn.Resource(m.Resource).Namespace(o.GetNamespace()), nil
	}
	return c.dyn.Resource(m.Resource), nil
}

// apply server-side applies o, for real or as a dry run, and returns the
// object the API server would store.
func (c *cluster) apply(ctx context.Context, o *unstructured.Unstructured, dryRun bool) (*unstructured.Unstructured, error) {
	r, err := c.resource(o)
	if err != nil {
		return nil, err
	}
	opts := metav1.ApplyOptions{FieldManager: "proxy-topology-e2e", Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	return r.Apply(ctx, o.GetName(), o, opts)
}

// ensureNamespace creates a namespace for real: a dry-run of a namespaced
// object needs its namespace to exist.
func (c *cluster) ensureNamespace(t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}
	if _, err := c.client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// dryRunAll applies every object as a server-side dry run and reports each
// refusal and each warning (deprecated APIs, PodSecurity) as a failure.
func (c *cluster) dryRunAll(t *testing.T, what string, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if len(objs) == 0 {
		t.Fatalf("%s: no objects", what)
	}
	for _, o := range objs {
		before := c.warnings.count()
		got, err := c.apply(ctx, o, true)
		if err != nil {
			t.Errorf("%s: the API refuses %s: %v", what, key(o), err)
			continue
		}
		if got.GetUID() == "" && o.GetKind() != "Namespace" {
			// A dry-run create still gets a UID: the object went through
			// defaulting, validation and admission.
			t.Errorf("%s: %s: dry run returned no UID", what, key(o))
		}
		if w := c.warnings.since(before); len(w) > 0 {
			t.Errorf("%s: %s: API warnings %q", what, key(o), w)
		}
	}
}

var (
	deployOnce sync.Once
	deployErr  error
)

// deployed applies deploy/kubernetes for real, once: the ServiceAccounts
// and RBAC must exist for the tests that authenticate as them. It starts
// no controller: tests that need the Deployment turned into a placed Pod
// add the real scheduler and controller-manager (withControlPlane), and
// since there is no kubelet, the tests run the containers as processes.
func deployed(t *testing.T) *cluster {
	t.Helper()
	c := getCluster(t)
	deployOnce.Do(func() {
		objs := kustomizeBuild(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, o := range objs {
			if _, err := c.apply(ctx, o, false); err != nil {
				deployErr = fmt.Errorf("applying %s: %w", key(o), err)
				return
			}
		}
	})
	if deployErr != nil {
		t.Fatal(deployErr)
	}
	return c
}

// TestManifestsAcceptedByAPI: every object of `kustomize build
// deploy/kubernetes` and of `helm template` with the default values passes
// the real API server's defaulting, validation and admission (server-side
// dry run, as creates when this test runs first).
func TestManifestsAcceptedByAPI(t *testing.T) {
	c := getCluster(t)
	c.ensureNamespace(t, Namespace)
	kust := kustomizeBuild(t)
	kinds := map[string]int{}
	for _, o := range kust {
		kinds[o.GetKind()]++
	}
	for kind, n := range map[string]int{
		"Namespace": 1, "CSIDriver": 1, "ConfigMap": 1, "Secret": 0, "ServiceAccount": 2,
		"Deployment": 1, "DaemonSet": 1, "StorageClass": 3, "ClusterRole": 4, "ClusterRoleBinding": 4,
		"Role": 2, "RoleBinding": 2,
	} {
		if kinds[kind] != n {
			t.Errorf("deploy/kubernetes has %d %s, want %d", kinds[kind], kind, n)
		}
	}
	// The check can fail: the API refuses what is wrong.
	for _, o := range kust {
		if o.GetKind() != "CSIDriver" {
			continue
		}
		bad := o.DeepCopy()
		_ = unstructured.SetNestedField(bad.Object, "Sometimes", "spec", "fsGroupPolicy")
		if _, err := c.apply(context.Background(), bad, true); !apierrors.IsInvalid(err) {
			t.Errorf("dry run of a CSIDriver with a bogus fsGroupPolicy: %v, want Invalid", err)
		}
	}
	t.Run("kustomize", func(t *testing.T) { c.dryRunAll(t, "deploy/kubernetes", kust) })
	t.Run("helm", func(t *testing.T) { c.dryRunAll(t, "helm template", helmTemplate(t)) })
	t.Run("helm with connections and extras", func(t *testing.T) {
		c.dryRunAll(t, "helm template (values-extra)", helmTemplate(t, "--values", writeExtraValues(t)))
	})
}
