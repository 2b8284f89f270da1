package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/democratic-csi/proxy-topology/pkg/nodetopology"
)

// DefaultBackoff paces the retries of the start-up read of node labels:
// 5 attempts, waiting 1s, 2s, 4s and 8s between them (apimachinery's
// wait.Backoff: Steps attempts, the first wait Duration, each next one
// Factor times longer). Together with DefaultTimeout it is long enough for
// RBAC applied in the same `kubectl apply` to take effect, and short
// enough that a real misconfiguration shows up as a restarting pod.
var DefaultBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Steps: 5}

// DefaultTimeout bounds the whole read, attempts and waits together.
const DefaultTimeout = time.Minute

// NodeLabelSource reads the labels of a Node object; it is the nodeLabel
// source of node topology rules.
type NodeLabelSource struct {
	// Nodes is the API client (a *Client; a fake in tests).
	Nodes NodeGetter
	// Backoff paces the retries; Steps 0 means DefaultBackoff.
	Backoff wait.Backoff
	// Timeout bounds the whole read; 0 means DefaultTimeout.
	Timeout time.Duration
	// Log gets one line per failed attempt; nil means slog.Default().
	Log *slog.Logger
}

var _ nodetopology.LabelSource = (*NodeLabelSource)(nil)

// ErrNodeLabels wraps every error NodeLabels returns.
var ErrNodeLabels = errors.New("cannot read node labels")

// NodeLabels GETs the Node called nodeName and returns its labels. Any
// failure is retried as s.Backoff says, within s.Timeout
// (k8s.io/apimachinery's wait.ExponentialBackoffWithContext); the error
// after the last attempt says what to fix (RBAC, the node name, the
// credentials or the network).
func (s *NodeLabelSource) NodeLabels(ctx context.Context, nodeName string) (map[string]string, error) {
	b := s.Backoff
	if b.Steps <= 0 {
		b = DefaultBackoff
	}
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	log := s.Log
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	start := time.Now()
	var labels map[string]string
	var lastErr error
	attempt := 0
	err := wait.ExponentialBackoffWithContext(ctx, b, func(ctx context.Context) (bool, error) {
		attempt++
		labels, lastErr = s.get(ctx, nodeName)
		switch {
		case lastErr == nil:
			if attempt > 1 {
				log.Info("read node labels", "node", nodeName, "attempts", attempt)
			}
			return true, nil
		case attempt < b.Steps:
			log.Warn("cannot read node labels; retrying", "node", nodeName, "attempt", attempt, "of", b.Steps, "error", explain(lastErr, nodeName))
		}
		return false, nil
	})
	if err == nil {
		return labels, nil
	}
	if lastErr == nil {
		lastErr = err // ctx ended before the first attempt
	}
	return nil, fmt.Errorf("%w of Node %q (%d attempts in %s): %w", ErrNodeLabels, nodeName, attempt, time.Since(start).Round(time.Millisecond), explainErr(lastErr, nodeName))
}

func (s *NodeLabelSource) get(ctx context.Context, nodeName string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	node, err := s.Nodes.GetNode(ctx, nodeName)
	if err != nil {
		return nil, err
	}
	return node.Labels, nil
}

// explain turns an API error into what to fix; the API server's own message
// (which names the user) is kept.
func explain(err error, nodeName string) string { return explainErr(err, nodeName).Error() }

func explainErr(err error, nodeName string) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsForbidden(err):
		return fmt.Errorf("RBAC denies it: the node plugin's ServiceAccount needs verb \"get\" on resource \"nodes\" (core API group, cluster scope), granted by a ClusterRole and ClusterRoleBinding such as deploy/kubernetes/node-labels: %w", err)
	case apierrors.IsNotFound(err):
		return fmt.Errorf("no Node named %q: the node id (--node-id, CSI_NODE_ID) must be the Kubernetes node name, e.g. CSI_NODE_ID from the downward API field spec.nodeName: %w", nodeName, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("the API server rejected the credentials (expired or foreign ServiceAccount token, or a bad --kubeconfig): %w", err)
	}
	return err
}
