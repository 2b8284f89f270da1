// Package kube is proxy-topology's Kubernetes API access: the node plugin's
// nodeLabel source (its own Node object) and the controller's connection
// files read from a Secret through an informer.
//
// It talks to the API through a REST client that knows only core/v1, not
// client-go's typed clientset: that one registers every API group in its
// scheme and would more than double the binary for two calls.
package kube

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RequestTimeout bounds every API call made through Client: the label read
// happens while the node plugin starts, and a hung API server must turn
// into a retry, not a stuck pod. Watches are not bounded by it.
const RequestTimeout = 10 * time.Second

// NodeGetter reads Node objects.
type NodeGetter interface {
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
}

// SecretWatcher lists and watches Secrets of a namespace.
type SecretWatcher interface {
	ListSecrets(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.SecretList, error)
	WatchSecrets(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error)
}

// RESTConfig returns the API server config: the kubeconfig file when path is
// set (the --kubeconfig flag or KUBECONFIG), otherwise the in-cluster
// ServiceAccount config.
func RESTConfig(kubeconfig, userAgent string) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
	} else {
		cfg, err = rest.InClusterConfig()
		if errors.Is(err, rest.ErrNotInCluster) {
			return nil, errors.New("not running in a Kubernetes pod (KUBERNETES_SERVICE_HOST is unset) and no --kubeconfig given")
		}
		if err != nil {
			return nil, fmt.Errorf("in-cluster config: %w", err)
		}
	}
	cfg.UserAgent = userAgent
	return cfg, nil
}

// Client is a core/v1 REST client: a NodeGetter and a SecretWatcher.
type Client struct {
	rest   *rest.RESTClient
	params runtime.ParameterCodec
	// Host is the API server's URL, for messages.
	Host string
}

var (
	_ NodeGetter    = (*Client)(nil)
	_ SecretWatcher = (*Client)(nil)
)

// NewClient returns a client for cfg.
func NewClient(cfg *rest.Config) (*Client, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.APIPath = "/api"
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client for %s: %w", cfg.Host, err)
	}
	return &Client{rest: rc, params: runtime.NewParameterCodec(scheme), Host: cfg.Host}, nil
}

// GetNode GETs /api/v1/nodes/<name>.
func (c *Client) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	node := &corev1.Node{}
	err := c.rest.Get().Resource("nodes").Name(name).Timeout(RequestTimeout).Do(ctx).Into(node)
	return node, err
}

// ListSecrets lists the Secrets of namespace that opts selects.
func (c *Client) ListSecrets(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.SecretList, error) {
	list := &corev1.SecretList{}
	err := c.rest.Get().Namespace(namespace).Resource("secrets").
		VersionedParams(&opts, c.params).Timeout(RequestTimeout).Do(ctx).Into(list)
	return list, err
}

// WatchSecrets watches the Secrets of namespace that opts selects.
func (c *Client) WatchSecrets(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.rest.Get().Namespace(namespace).Resource("secrets").
		VersionedParams(&opts, c.params).Watch(ctx)
}
