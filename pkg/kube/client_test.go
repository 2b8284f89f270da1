package kube

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// fakeServer answers the three requests Client makes the way an API
// server does on the wire; make e2e-kube runs Client against a real one.
type fakeServer struct {
	mu       sync.Mutex
	requests []string
}

func status(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code, "message": msg})
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests = append(f.requests, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery+" "+r.UserAgent())
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	switch {
	case r.URL.Path == "/api/v1/nodes/w1":
		_ = enc.Encode(map[string]any{"kind": "Node", "apiVersion": "v1", "metadata": map[string]any{"name": "w1", "labels": map[string]string{"zone": "z1"}}})
	case r.URL.Path == "/api/v1/nodes/secret":
		status(w, http.StatusForbidden, "Forbidden", `nodes "secret" is forbidden: User "u" cannot get resource "nodes"`)
	case strings.HasPrefix(r.URL.Path, "/api/v1/nodes/"):
		status(w, http.StatusNotFound, "NotFound", `nodes "x" not found`)
	case r.URL.Path == "/api/v1/namespaces/ns/secrets" && r.URL.Query().Get("watch") == "true":
		flusher := w.(http.Flusher)
		var events []map[string]any
		if r.URL.Query().Get("sendInitialEvents") == "true" {
			// A streaming list (client-go's WatchListClient): the current
			// state, then a bookmark that ends the initial events.
			events = append(events,
				map[string]any{"type": "ADDED", "object": secretJSON("7", "YQ==")},
				map[string]any{"type": "BOOKMARK", "object": map[string]any{"kind": "Secret", "apiVersion": "v1", "metadata": map[string]any{
					"resourceVersion": "7", "annotations": map[string]string{"k8s.io/initial-events-end": "true"}}}})
		}
		events = append(events,
			map[string]any{"type": "MODIFIED", "object": secretJSON("8", "Yg==")},
			map[string]any{"type": "DELETED", "object": secretJSON("9", "")})
		for _, ev := range events {
			_ = enc.Encode(ev)
			flusher.Flush()
		}
		<-r.Context().Done()
	case r.URL.Path == "/api/v1/namespaces/ns/secrets":
		_ = enc.Encode(map[string]any{"kind": "SecretList", "apiVersion": "v1", "metadata": map[string]any{"resourceVersion": "7"},
			"items": []any{secretJSON("7", "YQ==")}})
	default:
		status(w, http.StatusNotFound, "NotFound", "no such path "+r.URL.Path)
	}
}

func secretJSON(rv, a string) map[string]any {
	s := map[string]any{"kind": "Secret", "apiVersion": "v1", "metadata": map[string]any{"name": "conn", "namespace": "ns", "resourceVersion": rv}}
	if a != "" {
		s["data"] = map[string]string{"a.yaml": a}
	}
	return s
}

func TestClient(t *testing.T) {
	fs := &fakeServer{}
	srv := httptest.NewServer(fs)
	defer srv.Close()
	c, err := NewClient(&rest.Config{Host: srv.URL, UserAgent: "proxy-topology/test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	node, err := c.GetNode(ctx, "w1")
	if err != nil || node.Labels["zone"] != "z1" {
		t.Errorf("GetNode(w1) = %v, %v", node.GetLabels(), err)
	}
	if _, err := c.GetNode(ctx, "secret"); !apierrors.IsForbidden(err) {
		t.Errorf("GetNode(secret) = %v, want Forbidden", err)
	}
	if _, err := c.GetNode(ctx, "x"); !apierrors.IsNotFound(err) {
		t.Errorf("GetNode(x) = %v, want NotFound", err)
	}

	opts := metav1.ListOptions{FieldSelector: "metadata.name=conn"}
	list, err := c.ListSecrets(ctx, "ns", opts)
	if err != nil || len(list.Items) != 1 || string(list.Items[0].Data["a.yaml"]) != "a" || list.ResourceVersion != "7" {
		t.Errorf("ListSecrets = %+v, %v", list, err)
	}
	w, err := c.WatchSecrets(ctx, "ns", metav1.ListOptions{FieldSelector: "metadata.name=conn", ResourceVersion: "7"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var got []string
	timeout := time.After(10 * time.Second)
	for len(got) < 2 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed after %v", got)
			}
			rv := ""
			if m, err := metaOf(ev); err == nil {
				rv = m
			}
			got = append(got, string(ev.Type)+" "+rv)
		case <-timeout:
			t.Fatalf("watch events: %v", got)
		}
	}
	if diff := cmp.Diff([]string{"MODIFIED 8", "DELETED 9"}, got); diff != "" {
		t.Errorf("watch events (-want +got):\n%s", diff)
	}

	fs.mu.Lock()
	defer fs.mu.Unlock()
	want := []string{
		"GET /api/v1/nodes/w1?timeout=10s proxy-topology/test",
		"GET /api/v1/nodes/secret?timeout=10s proxy-topology/test",
		"GET /api/v1/nodes/x?timeout=10s proxy-topology/test",
		"GET /api/v1/namespaces/ns/secrets?fieldSelector=metadata.name%3Dconn&timeout=10s proxy-topology/test",
		"GET /api/v1/namespaces/ns/secrets?fieldSelector=metadata.name%3Dconn&resourceVersion=7&watch=true proxy-topology/test",
	}
	if diff := cmp.Diff(want, fs.requests); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

func metaOf(ev watch.Event) (string, error) {
	m, err := metaAccessor(ev.Object)
	if err != nil {
		return "", err
	}
	return m.GetResourceVersion(), nil
}

// TestSecretSourceOverREST runs the informer over Client and the wire
// format: list, then the watch's update and delete.
func TestSecretSourceOverREST(t *testing.T) {
	srv := httptest.NewServer(&fakeServer{})
	defer srv.Close()
	c, err := NewClient(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	src := NewSecretSource(c, "ns", "conn", quiet)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := StartSecretSource(ctx, src); err != nil {
		t.Fatal(err)
	}
	// The fake's watch sends MODIFIED (a.yaml = "b") then DELETED; the
	// list before it had "a". Whichever the source has seen, it is one of
	// those states, and it ends deleted.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := src.Stat("a", time.Now())
		if err != nil && strings.Contains(err.Error(), "does not exist") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watch's delete never arrived: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func metaAccessor(obj any) (metav1.Object, error) { return meta.Accessor(obj) }
