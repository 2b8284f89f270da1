package kube

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
)

// fakeAPI serves NodeGetter and SecretWatcher from a client-go fake
// clientset, whose tracker, reactors and recorded actions the tests use.
type fakeAPI struct{ c *fake.Clientset }

func (f fakeAPI) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	return f.c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

func (f fakeAPI) ListSecrets(ctx context.Context, ns string, o metav1.ListOptions) (*corev1.SecretList, error) {
	return f.c.CoreV1().Secrets(ns).List(ctx, o)
}

func (f fakeAPI) WatchSecrets(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
	return f.c.CoreV1().Secrets(ns).Watch(ctx, o)
}

// IsWatchListSemanticsUnSupported tells the reflector the fake cannot
// stream lists (the fake clientset says the same of itself).
func (fakeAPI) IsWatchListSemanticsUnSupported() bool { return true }
