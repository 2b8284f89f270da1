package capability

import (
	"context"
	"slices"
	"strings"
)

// Node-local storage (SPEC §12): a built-in local-hostpath connection
// without topology keeps each volume on the disk of the node whose
// controller creates it, and pins the volume to that node. A central
// controller (a Deployment, not the node-local mode's controller on every
// node) would create them all on its own pod's node, which is rarely what
// anyone wants; `check` warns about the same connection files.

// noteNodeLocal is told the node-local connections a refresh saw (every
// file is read once per refresh, for the capabilities and the loop check,
// so this costs no read of its own). With Options.WarnCentralNodeLocal it
// warns when they differ from those last warned about: at start-up, and
// when one is added at run time. refreshMu is held.
func (w *Watcher) noteNodeLocal(ctx context.Context, names []string) {
	if !w.opts.WarnCentralNodeLocal || slices.Equal(names, w.nodeLocalWarned) {
		return
	}
	w.nodeLocalWarned = names
	if len(names) == 0 {
		return
	}
	w.log.WarnContext(ctx, "node-local connections served by a central controller: their volumes are created on this controller's disk and pinned to its node id; deploy the node-local mode (proxy.nodeLocal, docs/kubernetes.md) or declare the topology of shared storage",
		"connections", strings.Join(names, ","), "node_id", w.opts.NodeID)
}
