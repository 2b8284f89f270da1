package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/democratic-csi/proxy-topology/pkg/nodetopology"
)

// Backoff bounds the retries of a start-up read. The zero value of each
// field means its DefaultBackoff value.
type Backoff struct {
	// Attempts is how many times to try in all.
	Attempts int
	// Initial is the wait after the first failure; it doubles after each
	// further failure up to Max.
	Initial, Max time.Duration
	// Total bounds the whole read, waits and attempts together.
	Total time.Duration
}

// DefaultBackoff tries 5 times, waiting 1s, 2s, 4s, 8s between tries (16s
// would be the next), and gives up after a minute whatever happens: long
// enough for RBAC applied in the same `kubectl apply` to take effect, short
// enough that a real misconfiguration shows up as a restarting pod.
var DefaultBackoff = Backoff{Attempts: 5, Initial: time.Second, Max: 16 * time.Second, Total: time.Minute}

func (b Backoff) withDefaults() Backoff {
	if b.Attempts <= 0 {
		b.Attempts = DefaultBackoff.Attempts
	}
	if b.Initial <= 0 {
		b.Initial = DefaultBackoff.Initial
	}
	if b.Max <= 0 {
		b.Max = DefaultBackoff.Max
	}
	if b.Total <= 0 {
		b.Total = DefaultBackoff.Total
	}
	return b
}

// NodeLabelSource reads the labels of a Node object; it is the nodeLabel
// source of node topology rules.
type NodeLabelSource struct {
	// Nodes is the API client (a *Client; a fake in tests).
	Nodes NodeGetter
	// Backoff bounds the retries; zero fields mean DefaultBackoff.
	Backoff Backoff
	// Log gets one line per failed attempt; nil means slog.Default().
	Log *slog.Logger

	// sleep waits d or until ctx ends; nil means a timer. Tests replace it.
	sleep func(ctx context.Context, d time.Duration) error
}

var _ nodetopology.LabelSource = (*NodeLabelSource)(nil)

// ErrNodeLabels wraps every error NodeLabels returns.
var ErrNodeLabels = errors.New("cannot read node labels")

// NodeLabels GETs the Node called nodeName and returns its labels. Any
// failure is retried with exponential backoff within s.Backoff; the error
// after the last attempt says what to fix (RBAC, the node name, the
// credentials or the network).
func (s *NodeLabelSource) NodeLabels(ctx context.Context, nodeName string) (map[string]string, error) {
	b := s.Backoff.withDefaults()
	log := s.Log
	if log == nil {
		log = slog.Default()
	}
	sleep := s.sleep
	if sleep == nil {
		sleep = sleepCtx
	}
	ctx, cancel := context.WithTimeout(ctx, b.Total)
	defer cancel()

	start := time.Now()
	wait := b.Initial
	var err error
	attempt := 0
	for attempt < b.Attempts {
		attempt++
		var labels map[string]string
		labels, err = s.get(ctx, nodeName)
		if err == nil {
			if attempt > 1 {
				log.Info("read node labels", "node", nodeName, "attempts", attempt)
			}
			return labels, nil
		}
		if attempt == b.Attempts {
			break
		}
		log.Warn("cannot read node labels; retrying", "node", nodeName, "attempt", attempt, "of", b.Attempts, "retry_in", wait, "error", explain(err, nodeName))
		if sleep(ctx, wait) != nil {
			break
		}
		wait = min(2*wait, b.Max)
	}
	return nil, fmt.Errorf("%w of Node %q (%d attempts in %s): %w", ErrNodeLabels, nodeName, attempt, time.Since(start).Round(time.Millisecond), explainErr(err, nodeName))
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

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
