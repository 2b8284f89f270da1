// Package kube is proxy-topology's Kubernetes API access: the node plugin's
// nodeLabel source (its own Node object) and the controller's connection
// files read from a Secret through an informer.
//
// Only the core/v1 typed client is used, not the full clientset, so the
// binary does not carry every API group it never calls.
package kube

import (
	"errors"
	"fmt"
	"time"

	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RequestTimeout bounds every API call made through Client: the label read
// happens while the node plugin starts, and a hung API server must turn
// into a retry, not a stuck pod.
const RequestTimeout = 10 * time.Second

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
	cfg.Timeout = RequestTimeout
	return cfg, nil
}

// NewClient returns a core/v1 client for cfg.
func NewClient(cfg *rest.Config) (corev1client.CoreV1Interface, error) {
	c, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client for %s: %w", cfg.Host, err)
	}
	return c, nil
}
