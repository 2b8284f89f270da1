package main

import (
	"fmt"
	"maps"
	"slices"

	"github.com/democratic-csi/proxy-topology/pkg/config"
	"github.com/democratic-csi/proxy-topology/pkg/labels"
	"github.com/democratic-csi/proxy-topology/pkg/nodetopology"
)

// checkUpstreamTopology warns about a proxy.perDriver.upstreamTopology
// target that no node reports (SPEC §13): the translated answer becomes
// PV node affinity on that key, so only nodes labelled by other means
// could use the volumes. The node key is exempt: nodes report it while a
// connection maps to it (node-local). The map itself (label keys, clashes
// with the topology list) is validated with the file.
func checkUpstreamTopology(r *checkResult, c *config.Connection, ev *nodetopology.Evaluator, produced map[string]bool) {
	m := c.Proxy.PerDriver.UpstreamTopology
	nodeKey := labels.FullKey(ev.Prefix(), nodetopology.TypeNode)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		full := labels.FullKey(ev.Prefix(), m[k])
		if full == nodeKey || produced[full] {
			continue
		}
		r.warnings = append(r.warnings, fmt.Sprintf(
			"proxy.perDriver.upstreamTopology[%q]: no node reports %s (no fromRegexp rule has that key, nor does type %s): volumes the upstream places are usable only on nodes labelled by other means",
			k, full, ev.Type()))
	}
}
