package kube

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/democratic-csi/proxy-topology/pkg/nodetopology"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func node(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

var nodesResource = schema.GroupResource{Resource: "nodes"}

// fast keeps the default number of attempts but waits a millisecond
// between them, so retry tests take no wall time.
var fast = wait.Backoff{Duration: time.Millisecond, Steps: DefaultBackoff.Steps}

// failing makes the first n GETs of nodes fail with err.
func failing(client *fake.Clientset, n int, err error) *int {
	calls := 0
	client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		calls++
		if calls <= n {
			return true, nil, err
		}
		return false, nil, nil
	})
	return &calls
}

func TestNodeLabels(t *testing.T) {
	labels := map[string]string{"topology.kubernetes.io/zone": "zone1", "kubernetes.io/hostname": "w1"}
	client := fake.NewClientset(node("w1", labels), node("w2", nil))
	src := &NodeLabelSource{Nodes: fakeAPI{client}, Log: quiet}

	got, err := src.NodeLabels(context.Background(), "w1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(labels, got); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	// A node without labels answers with no labels, not an error.
	got, err = src.NodeLabels(context.Background(), "w2")
	if err != nil || len(got) != 0 {
		t.Errorf("w2: %v, %v; want no labels, no error", got, err)
	}
	if n := len(client.Actions()); n != 2 {
		t.Errorf("%d API calls for two reads, want 2", n)
	}
}

func TestNodeLabelsErrors(t *testing.T) {
	forbidden := apierrors.NewForbidden(nodesResource, "w1", errors.New(`User "system:serviceaccount:kube-system:proxy-topology-node" cannot get resource "nodes" in API group "" at the cluster scope`))
	for _, tc := range []struct {
		name  string
		setup func(*fake.Clientset)
		// want are substrings of the error; is checks its chain.
		want []string
		is   func(error) bool
	}{
		{
			name: "not found",
			want: []string{
				`cannot read node labels of Node "w1" (5 attempts in `,
				`no Node named "w1": the node id (--node-id, CSI_NODE_ID) must be the Kubernetes node name`,
				`spec.nodeName`,
				`nodes "w1" not found`,
			},
			is: apierrors.IsNotFound,
		},
		{
			name:  "forbidden",
			setup: func(c *fake.Clientset) { failing(c, 1000, forbidden) },
			want: []string{
				`RBAC denies it: the node plugin's ServiceAccount needs verb "get" on resource "nodes" (core API group, cluster scope)`,
				`cannot get resource "nodes"`,
				`system:serviceaccount:kube-system:proxy-topology-node`,
			},
			is: apierrors.IsForbidden,
		},
		{
			name:  "unauthorized",
			setup: func(c *fake.Clientset) { failing(c, 1000, apierrors.NewUnauthorized("token expired")) },
			want:  []string{"rejected the credentials", "token expired"},
			is:    apierrors.IsUnauthorized,
		},
		{
			name:  "server error",
			setup: func(c *fake.Clientset) { failing(c, 1000, apierrors.NewServiceUnavailable("etcd is down")) },
			want:  []string{`cannot read node labels of Node "w1" (5 attempts in `, "etcd is down"},
			is:    apierrors.IsServiceUnavailable,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			if tc.setup != nil {
				tc.setup(client)
			}
			src := &NodeLabelSource{Nodes: fakeAPI{client}, Log: quiet, Backoff: fast}
			got, err := src.NodeLabels(context.Background(), "w1")
			if err == nil {
				t.Fatalf("got labels %v, want an error", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
			if !errors.Is(err, ErrNodeLabels) || !tc.is(err) {
				t.Errorf("error chain of %v: want ErrNodeLabels and the API error", err)
			}
			// Every kind of failure is retried: RBAC and nodes can appear a
			// moment after the pod starts.
			if n := len(client.Actions()); n != 5 {
				t.Errorf("%d API calls, want 5", n)
			}
		})
	}
}

func TestNodeLabelsRetrySucceeds(t *testing.T) {
	client := fake.NewClientset(node("w1", map[string]string{"zone": "z1"}))
	calls := failing(client, 2, apierrors.NewTooManyRequests("slow down", 1))
	src := &NodeLabelSource{Nodes: fakeAPI{client}, Log: quiet, Backoff: fast}
	got, err := src.NodeLabels(context.Background(), "w1")
	if err != nil {
		t.Fatal(err)
	}
	if got["zone"] != "z1" || *calls != 3 {
		t.Errorf("labels %v after %d calls; want zone=z1 after 3", got, *calls)
	}
}

// TestDefaultBackoff: the waits between attempts are the documented ones.
func TestDefaultBackoff(t *testing.T) {
	// wait.ExponentialBackoffWithContext makes Steps attempts and waits
	// Step() between two.
	b := DefaultBackoff
	var got []time.Duration
	for range b.Steps - 1 {
		got = append(got, b.Step())
	}
	s := time.Second
	if diff := cmp.Diff([]time.Duration{1 * s, 2 * s, 4 * s, 8 * s}, got); diff != "" {
		t.Errorf("waits (-want +got):\n%s", diff)
	}
}

// TestNodeLabelsAttempts: Backoff.Steps bounds the calls.
func TestNodeLabelsAttempts(t *testing.T) {
	client := fake.NewClientset()
	src := &NodeLabelSource{
		Nodes: fakeAPI{client}, Log: quiet,
		Backoff: wait.Backoff{Duration: time.Millisecond, Steps: 7},
	}
	if _, err := src.NodeLabels(context.Background(), "w1"); err == nil || !strings.Contains(err.Error(), "(7 attempts in ") {
		t.Fatalf("error %v: want 7 attempts", err)
	}
	if n := len(client.Actions()); n != 7 {
		t.Errorf("%d API calls, want 7", n)
	}
}

// TestNodeLabelsTotalBound uses the real timer: the overall bound cuts the
// retries short however many attempts are left.
func TestNodeLabelsTotalBound(t *testing.T) {
	client := fake.NewClientset()
	src := &NodeLabelSource{
		Nodes: fakeAPI{client}, Log: quiet,
		Backoff: wait.Backoff{Duration: 20 * time.Millisecond, Factor: 1.5, Steps: 100}, Timeout: 150 * time.Millisecond,
	}
	start := time.Now()
	_, err := src.NodeLabels(context.Background(), "w1")
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("took %s, want about 150ms", took)
	}
	if err == nil || !apierrors.IsNotFound(err) {
		t.Errorf("error %v: want the last API error, NotFound", err)
	}
	if n := len(client.Actions()); n < 2 || n > 10 {
		t.Errorf("%d attempts in 150ms with 20-40ms waits", n)
	}
}

func TestNodeLabelsCanceled(t *testing.T) {
	client := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	src := &NodeLabelSource{Nodes: fakeAPI{client}, Log: quiet}
	if _, err := src.NodeLabels(ctx, "w1"); err == nil {
		t.Fatal("no error from a canceled context")
	}
	if n := len(client.Actions()); n != 0 {
		t.Errorf("%d attempts after cancel, want none", n)
	}
}

// TestGatherNodeLabels runs the source through nodetopology.Gather, as serve
// does: a verbatim key and a short key from labels, and a failing source
// that turns nodeLabel rules into errors.
func TestGatherNodeLabels(t *testing.T) {
	ev, err := nodetopology.Compile(nodetopology.Config{
		Type: nodetopology.TypeZone,
		FromRegexp: []nodetopology.Rule{
			{TopologyKey: "topology.kubernetes.io/zone", Source: nodetopology.SourceNodeLabel, Label: "topology.kubernetes.io/zone"},
			{TopologyKey: "rack", Source: nodetopology.SourceNodeLabel, Label: "example.com/rack", Regex: "rack-(\\d+)", Template: "r{match:1}"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(node("w1", map[string]string{"topology.kubernetes.io/zone": "zone1", "example.com/rack": "rack-7"}))
	src := &NodeLabelSource{Nodes: fakeAPI{client}, Log: quiet}
	res := ev.Evaluate(nodetopology.Gather(context.Background(), ev, "w1", src))
	want := map[string]string{"topology.kubernetes.io/zone": "zone1", nodetopology.DefaultPrefix + "/rack": "r7"}
	if diff := cmp.Diff(want, res.Segments); diff != "" {
		t.Errorf("segments (-want +got):\n%s", diff)
	}

	failingSrc := &NodeLabelSource{Nodes: fakeAPI{client}, Log: quiet, Backoff: wait.Backoff{Steps: 1}}
	res = ev.Evaluate(nodetopology.Gather(context.Background(), ev, "w9", failingSrc))
	if res.Err() == nil || !strings.Contains(res.Err().Error(), `no Node named "w9"`) {
		t.Errorf("Err() = %v; want the label source's error", res.Err())
	}
}
