package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/internal/csiclient"
	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/config"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
	"github.com/democratic-csi/proxy-topology/pkg/labels"
	"github.com/democratic-csi/proxy-topology/pkg/nodetopology"
)

// Node-local storage (SPEC §12): volumes of a local-hostpath connection
// without topology are pinned to their node by <prefix>/node, so every
// node that may hold one must carry that label, which kubelet copies from
// NodeGetInfo at registration and never updates.

// reportNodeKey adds <prefix>/node=<node name> to a node plugin's segments
// when the deployment is in node-local mode (proxy.nodeLocal) or a
// node-local connection exists at start-up; under type node it is there
// already. A node whose rules failed keeps failing: the key would hide
// the misconfiguration of its other keys. A node name that is no label
// value is not reported (kubelet would refuse the registration): the
// error names the node-local connections, whose CreateVolume fails with
// FAILED_PRECONDITION on this node (accessible.NodeNameError).
func reportNodeKey(res *nodetopology.Result, ev *nodetopology.Evaluator, nodeLocalMode bool, nodeName string, store *connection.Store, log *slog.Logger) {
	key := labels.FullKey(ev.Prefix(), nodetopology.TypeNode)
	if res.Err() != nil || res.Segments[key] != "" {
		return
	}
	local := store.NodeLocalNames()
	why := "proxy.nodeLocal is true"
	if !nodeLocalMode {
		if len(local) == 0 {
			return
		}
		why = "node-local connections " + strings.Join(local, ",") + " exist"
	}
	if err := labels.ValueError(nodeName); err != nil {
		affected := local
		if len(affected) == 0 {
			affected = []string{"(any added later)"}
		}
		log.Error("node-local connections cannot work on this node: the node name is no label value, so the node does not report the node key and their CreateVolume fails with FAILED_PRECONDITION",
			"connections", strings.Join(affected, ","), "key", key, "node", nodeName, "why", why,
			"error", accessible.NodeNameError(ev.Accessibility(), nodeName, affected))
		return
	}
	res.Segments[key] = nodeName
	log.Info("reporting the node key: node-local volumes are pinned by it", "key", key, "value", nodeName, "why", why)
}

// checkNodeLocal warns about a node-local connection in a deployment not
// in node-local mode (SPEC §12, §13): its volumes would be created on
// whatever node the one controller runs on, and pinned there.
func checkNodeLocal(r *checkResult, c *config.Connection, cfg *config.Loaded) {
	if len(r.errors) > 0 || cfg.Proxy.NodeLocal || c == nil || !connection.IsNodeLocal(c, cfg.Topology.Accessibility()) {
		return
	}
	nodeKey := labels.FullKey(cfg.Topology.Prefix(), nodetopology.TypeNode)
	mode := "without the node-local deployment mode (proxy.nodeLocal: true, a controller and a --node-deployment provisioner on every node; docs/kubernetes.md) every volume lands on the one controller's node"
	if c.Driver == config.DriverCSI {
		r.warnings = append(r.warnings, fmt.Sprintf(
			"node-local: proxy.perDriver.upstreamTopology maps the upstream's answer to %s, so each volume stays on the node whose controller (and upstream) creates it and is pinned there; %s. If the upstream's storage is reachable from more than its node, map its keys to others, or declare where it is reachable in proxy.perDriver.topology",
			nodeKey, mode))
		return
	}
	r.warnings = append(r.warnings, fmt.Sprintf(
		"node-local: a local-hostpath connection without proxy.perDriver.topology keeps each volume on the disk of the node whose controller creates it, and pins the volume there by %s; %s. If %s is shared storage, declare where it is reachable in proxy.perDriver.topology",
		nodeKey, mode, c.LocalHostpath.ShareBasePath))
}

// dryRunDecide is the topology command's CreateVolume decision for c, the
// server's own (pcsi.Placement.Decide): a node-local connection is decided
// as the controller on the dry run's node would decide it (pinned to that
// node, or refused for another), any other by its topology list. With an
// upstream answer (in the upstream's keys) it then shows what the server
// does with that answer (pcsi.Placement.Created): the requirements the
// upstream gets, the answer translated by upstreamTopology and checked,
// or the refusal.
func dryRunDecide(stdout io.Writer, c *connection.Connection, req *csi.TopologyRequirement, answer []*csi.Topology, place pcsi.Placement) ([]*csi.Topology, error) {
	if c.Topology(place.Topology).NodeLocal() {
		fmt.Fprintf(stdout, "  node-local (no topology list, volumes stay on one node): decided as the controller on node %q\n", place.Host.Name)
	}
	d, err := place.Decide(c, req)
	if err != nil {
		return nil, err
	}
	up := c.Topology(place.Topology).Upstream()
	if !up.Empty() {
		fmt.Fprintf(stdout, "  requirements sent upstream (proxy.perDriver.upstreamTopology): requisite %s, preferred %s\n",
			csiclient.FormatTerms(up.Requirement(req).GetRequisite()), csiclient.FormatTerms(up.Requirement(req).GetPreferred()))
	}
	if answer == nil {
		return d.Topologies(), nil
	}
	fmt.Fprintf(stdout, "  upstream answers: %s\n", csiclient.FormatTerms(answer))
	created, err := place.Created(c, d, answer, req.GetRequisite())
	if err != nil {
		return nil, status.Errorf(accessible.AnswerCode, "connection %q: %v; the server deletes the upstream volume", c.Name, err)
	}
	return created.Topologies(), nil
}
