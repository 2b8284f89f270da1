package kube

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/democratic-csi/proxy-topology/pkg/connection"
)

const ns, secretName = "proxy-topology", "connections"

func secret(namespace, name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// harness runs a SecretSource over a fake clientset.
type harness struct {
	t       *testing.T
	client  *fake.Clientset
	src     *SecretSource
	changes chan struct{}
}

// start builds the source and waits until it is synced and its watch is
// open: the fake's watch does not replay from a resourceVersion, so an
// update made before the watch opened would be lost.
func start(t *testing.T, objs ...runtime.Object) *harness {
	t.Helper()
	client := fake.NewClientset(objs...)
	watching := make(chan struct{})
	var once sync.Once
	client.PrependWatchReactor("secrets", func(k8stesting.Action) (bool, watch.Interface, error) {
		once.Do(func() { close(watching) })
		return false, nil, nil
	})
	h := &harness{t: t, client: client, changes: make(chan struct{}, 100)}
	h.src = NewSecretSource(fakeAPI{client}, ns, secretName, quiet)
	h.src.onChange = func() { h.changes <- struct{}{} }
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := StartSecretSource(ctx, h.src); err != nil {
		t.Fatal(err)
	}
	select {
	case <-watching:
	case <-time.After(10 * time.Second):
		t.Fatal("informer never opened its watch")
	}
	h.drain()
	return h
}

func (h *harness) drain() {
	for {
		select {
		case <-h.changes:
		default:
			return
		}
	}
}

// waitFor polls cond until it holds; informer events are asynchronous.
func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
		select {
		case <-h.changes:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (h *harness) update(data map[string]string) {
	h.t.Helper()
	if _, err := h.client.CoreV1().Secrets(ns).Update(context.Background(), secret(ns, secretName, data), metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) stat(name string) connection.Version {
	h.t.Helper()
	v, err := h.src.Stat(name, time.Now())
	if err != nil {
		h.t.Fatalf("Stat(%s): %v", name, err)
	}
	return v
}

func (h *harness) read(name string) string {
	h.t.Helper()
	b, err := h.src.Read(name)
	if err != nil {
		h.t.Fatalf("Read(%s): %v", name, err)
	}
	return string(b)
}

func (h *harness) list() []string {
	h.t.Helper()
	names, err := h.src.List()
	if err != nil {
		h.t.Fatal(err)
	}
	return names
}

func TestSecretSourceReads(t *testing.T) {
	h := start(t,
		secret(ns, secretName, map[string]string{
			"nfs.yaml":        "driver: csi\n",
			"a-b.yaml":        "driver: local-hostpath\n",
			"a.yaml":          "driver: csi\n",
			"README":          "not a connection",
			"old.yml":         "wrong suffix",
			"bad name.yaml":   "not a valid connection name",
			"_private.yaml":   "not a valid connection name",
			".hidden.yaml":    "not a valid connection name",
			"nested/dir.yaml": "not a valid key, never a connection",
		}),
		// Neighbours the field selector keeps out (the fake ignores field
		// selectors, so the source must filter too).
		secret(ns, "other", map[string]string{"leak.yaml": "driver: csi\n"}),
		secret("elsewhere", secretName, map[string]string{"leak.yaml": "driver: csi\n"}),
	)
	if diff := cmp.Diff([]string{"a", "a-b", "nfs"}, h.list()); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	if got := h.read("nfs"); got != "driver: csi\n" {
		t.Errorf("Read(nfs) = %q", got)
	}
	if h.stat("nfs") != h.stat("a") {
		t.Error("equal values must have equal versions")
	}
	if h.stat("nfs") == h.stat("a-b") {
		t.Error("different values must have different versions")
	}
	if got, want := h.src.Describe("nfs"), "secret proxy-topology/connections key nfs.yaml"; got != want {
		t.Errorf("Describe = %q, want %q", got, want)
	}

	_, err := h.src.Stat("leak", time.Now())
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat(leak) = %v; want fs.ErrNotExist", err)
	}
	if want := "secret proxy-topology/connections key leak.yaml: file does not exist"; err == nil || err.Error() != want {
		t.Errorf("Stat(leak) error %q, want %q", err, want)
	}
	if _, err := h.src.Read("leak"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read(leak) = %v; want fs.ErrNotExist", err)
	}

	// Read hands out a copy: a caller that edits it cannot corrupt the
	// snapshot other readers share.
	b, _ := h.src.Read("nfs")
	copy(b, "XXXXXX")
	if got := h.read("nfs"); got != "driver: csi\n" {
		t.Errorf("Read after a caller's edit = %q", got)
	}
}

// TestSecretSourceFieldSelector checks the informer asks for one object, the
// request RBAC resourceNames can authorise.
func TestSecretSourceFieldSelector(t *testing.T) {
	h := start(t, secret(ns, secretName, nil))
	var verbs []string
	for _, a := range h.client.Actions() {
		var sel string
		switch a := a.(type) {
		case k8stesting.ListActionImpl:
			sel = a.ListRestrictions.Fields.String()
		case k8stesting.WatchActionImpl:
			sel = a.WatchRestrictions.Fields.String()
		default:
			t.Errorf("unexpected %s %s", a.GetVerb(), a.GetResource().Resource)
			continue
		}
		verbs = append(verbs, a.GetVerb())
		if a.GetNamespace() != ns || sel != "metadata.name=connections" {
			t.Errorf("%s in namespace %q with field selector %q; want %q and metadata.name=connections", a.GetVerb(), a.GetNamespace(), sel, ns)
		}
	}
	if diff := cmp.Diff([]string{"list", "watch"}, verbs); diff != "" {
		t.Errorf("verbs (-want +got):\n%s", diff)
	}
}

func TestSecretSourceUpdates(t *testing.T) {
	h := start(t, secret(ns, secretName, map[string]string{"a.yaml": "one", "b.yaml": "two"}))
	va, vb := h.stat("a"), h.stat("b")

	// Changing one key changes only its version, so the store re-reads
	// only that connection.
	h.update(map[string]string{"a.yaml": "one changed", "b.yaml": "two"})
	h.waitFor("a.yaml to change", func() bool { v, _ := h.src.Stat("a", time.Now()); return v != va })
	if h.read("a") != "one changed" {
		t.Errorf("Read(a) = %q", h.read("a"))
	}
	if h.stat("b") != vb {
		t.Error("b's version changed with a's value")
	}

	// A key added and one removed.
	h.update(map[string]string{"a.yaml": "one changed", "c.yaml": "three"})
	h.waitFor("c.yaml to appear", func() bool { _, err := h.src.Stat("c", time.Now()); return err == nil })
	if _, err := h.src.Stat("b", time.Now()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat(b) after removal = %v; want fs.ErrNotExist", err)
	}
	if diff := cmp.Diff([]string{"a", "c"}, h.list()); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}

	// A value set back to an old content gets the old version back.
	h.update(map[string]string{"a.yaml": "one", "c.yaml": "three"})
	h.waitFor("a.yaml to revert", func() bool { v, _ := h.src.Stat("a", time.Now()); return v == va })
}

func TestSecretSourceDeletedAndRecreated(t *testing.T) {
	h := start(t, secret(ns, secretName, map[string]string{"a.yaml": "one"}))
	if err := h.client.CoreV1().Secrets(ns).Delete(context.Background(), secretName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the Secret to go", func() bool { _, err := h.src.Stat("a", time.Now()); return err != nil })
	_, err := h.src.Stat("a", time.Now())
	if !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, ErrNoSecret) {
		t.Errorf("Stat after delete = %v; want ErrNoSecret and fs.ErrNotExist", err)
	}
	if _, err := h.src.Read("a"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read after delete = %v", err)
	}
	if names := h.list(); len(names) != 0 {
		t.Errorf("List after delete = %v", names)
	}
	if _, err := h.client.CoreV1().Secrets(ns).Create(context.Background(), secret(ns, secretName, map[string]string{"a.yaml": "again"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the Secret to come back", func() bool { _, err := h.src.Stat("a", time.Now()); return err == nil })
	if h.read("a") != "again" {
		t.Errorf("Read(a) = %q", h.read("a"))
	}
}

// TestSecretSourceAbsentAtStart: a missing Secret is not a start-up error;
// connections are missing until it is created.
func TestSecretSourceAbsentAtStart(t *testing.T) {
	h := start(t)
	if _, err := h.src.Stat("a", time.Now()); !errors.Is(err, ErrNoSecret) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat = %v; want ErrNoSecret and fs.ErrNotExist", err)
	}
	if names := h.list(); len(names) != 0 {
		t.Errorf("List = %v", names)
	}
	if _, err := h.client.CoreV1().Secrets(ns).Create(context.Background(), secret(ns, secretName, map[string]string{"a.yaml": "one"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the Secret to appear", func() bool { _, err := h.src.Stat("a", time.Now()); return err == nil })
}

func TestSecretSourceNotSynced(t *testing.T) {
	client := fake.NewClientset(secret(ns, secretName, map[string]string{"a.yaml": "one"}))
	src := NewSecretSource(fakeAPI{client}, ns, secretName, quiet)
	for name, err := range map[string]error{
		"Stat": func() error { _, err := src.Stat("a", time.Now()); return err }(),
		"Read": func() error { _, err := src.Read("a"); return err }(),
		"List": func() error { _, err := src.List(); return err }(),
	} {
		// Not synced is not "missing": the store must not report a
		// connection as absent just because the list has not come in.
		if !errors.Is(err, ErrNotSynced) || errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s before Start = %v; want ErrNotSynced only", name, err)
		}
	}
}

// TestSecretSourceForbidden: without RBAC the list never succeeds, and the
// start-up error says what to grant.
func TestSecretSourceForbidden(t *testing.T) {
	client := fake.NewClientset(secret(ns, secretName, nil))
	client.PrependReactor("list", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "", errors.New("no RBAC"))
	})
	src := NewSecretSource(fakeAPI{client}, ns, secretName, quiet)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src.Start(ctx)
	wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer wcancel()
	err := src.WaitForSync(wctx)
	if !errors.Is(err, ErrNotSynced) || !strings.Contains(err.Error(), "secret proxy-topology/connections") {
		t.Errorf("WaitForSync = %v; want ErrNotSynced naming the Secret", err)
	}
}

// TestSecretSourceConcurrent reads while the Secret changes; run with -race.
func TestSecretSourceConcurrent(t *testing.T) {
	h := start(t, secret(ns, secretName, map[string]string{"a.yaml": "v0"}))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if v, err := h.src.Read("a"); err != nil || !strings.HasPrefix(string(v), "v") {
					t.Errorf("Read = %q, %v", v, err)
					return
				}
				_, _ = h.src.Stat("a", time.Now())
				_, _ = h.src.List()
			}
		}()
	}
	for i := 1; i <= 20; i++ {
		h.update(map[string]string{"a.yaml": fmt.Sprintf("v%d", i)})
	}
	h.waitFor("the last update", func() bool { b, _ := h.src.Read("a"); return string(b) == "v20" })
	cancel()
	wg.Wait()
}

func TestParseSecretRef(t *testing.T) {
	for _, tc := range []struct{ in, ns, name string }{
		{"proxy-topology/connections", "proxy-topology", "connections"},
		{"a/b.c", "a", "b.c"},
		{"connections", "", ""},
		{"/connections", "", ""},
		{"ns/", "", ""},
		{"a/b/c", "", ""},
		{"", "", ""},
	} {
		gotNS, gotName, err := ParseSecretRef(tc.in)
		if gotNS != tc.ns || gotName != tc.name || (err == nil) != (tc.ns != "") {
			t.Errorf("ParseSecretRef(%q) = %q, %q, %v; want %q, %q", tc.in, gotNS, gotName, err, tc.ns, tc.name)
		}
	}
}
