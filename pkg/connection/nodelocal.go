package connection

import (
	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/config"
)

// IsNodeLocal reports a parsed connection file whose volumes live on one
// node's disk (accessible.Spec.NodeLocal): a built-in local-hostpath
// connection that declares no proxy.perDriver.topology (SPEC §12), or an
// upstream whose proxy.perDriver.upstreamTopology maps to the node key
// without a topology list (SPEC §13). check and serve use it before any
// connection is loaded; a loaded Connection answers from its compiled
// topology, built once (Connection.Topology(opts).NodeLocal()).
func IsNodeLocal(cfg *config.Connection, opts accessible.Options) bool {
	return cfg != nil && cfg.Driver != config.DriverGroup && cfg.Topology().NodeLocal(opts)
}

// NodeLocalNames names the node-local connections present now, in name
// order, by reading and parsing their files only: no upstream client is
// made and nothing is cached. A file that does not parse is left out
// (calls for it fail on their own).
func (s *Store) NodeLocalNames() []string {
	names, err := s.src.List()
	if err != nil {
		return nil
	}
	var out []string
	for _, n := range names {
		data, err := s.src.Read(n)
		if err != nil {
			continue
		}
		if cfg, _, err := config.ParseConnection(s.src.Describe(n), data, s.opts.Topology); err == nil && IsNodeLocal(cfg, s.opts.Topology) {
			out = append(out, n)
		}
	}
	return out
}
