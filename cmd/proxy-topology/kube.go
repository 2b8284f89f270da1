package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"k8s.io/klog/v2"

	"github.com/democratic-csi/proxy-topology/pkg/connection"
	"github.com/democratic-csi/proxy-topology/pkg/kube"
	"github.com/democratic-csi/proxy-topology/pkg/nodetopology"
)

var klogOnce sync.Once

// routeKlog sends what the Kubernetes libraries log through klog (client-go,
// mount-utils in the built-in driver) to the process logger, so a cluster
// sees one log format. The first logger wins: klog has one global sink.
func routeKlog(log *slog.Logger) {
	klogOnce.Do(func() { klog.SetSlogLogger(log.With("component", "klog")) })
}

// kubeClient builds the core/v1 client from --kubeconfig or the pod's
// ServiceAccount.
func kubeClient(o Options, version string, log *slog.Logger) (*kube.Client, error) {
	routeKlog(log)
	cfg, err := kube.RESTConfig(o.Kubeconfig, "proxy-topology/"+version)
	if err != nil {
		return nil, err
	}
	return kube.NewClient(cfg)
}

// gatherNodeInputs reads the node's topology inputs; with nodeLabel rules
// that includes its Node object, with retries (kube.DefaultBackoff). When
// the labels cannot be read it fails rather than let the node register
// without the segments those rules would add: kubelet never updates a
// registered node's segments, while a failed start is retried by the
// pod's restart policy.
func gatherNodeInputs(ctx context.Context, o Options, ev *nodetopology.Evaluator, version string, log *slog.Logger) (nodetopology.Inputs, error) {
	var src nodetopology.LabelSource
	host := ""
	if ev.NeedsLabels() {
		c, err := kubeClient(o, version, log)
		if err != nil {
			return nodetopology.Inputs{}, fmt.Errorf("proxy.nodeTopology: nodeLabel rules read the Node object: %w", err)
		}
		src, host = &kube.NodeLabelSource{Nodes: c, Log: log}, c.Host
	}
	in := nodetopology.Gather(ctx, ev, o.NodeID, src)
	if in.LabelsErr != nil {
		return in, fmt.Errorf("proxy.nodeTopology: nodeLabel rules (API server %s): %w", host, in.LabelsErr)
	}
	return in, nil
}

// secretSource starts the informer on proxy.configSecret and waits for
// its first list.
func secretSource(ctx context.Context, o Options, ref, version string, log *slog.Logger, changed func()) (*kube.SecretSource, error) {
	ns, name, err := kube.ParseSecretRef(ref)
	if err != nil {
		return nil, err
	}
	c, err := kubeClient(o, version, log)
	if err != nil {
		return nil, err
	}
	src := kube.NewSecretSource(c, ns, name, log)
	src.OnChange(changed)
	if err := kube.StartSecretSource(ctx, src); err != nil {
		return nil, fmt.Errorf("API server %s: %w", c.Host, err)
	}
	return src, nil
}

var _ connection.Source = (*kube.SecretSource)(nil)
