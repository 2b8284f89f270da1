package connection

import "github.com/democratic-csi/proxy-topology/pkg/config"

// NodeLocal reports a connection whose volumes live on one node's disk: a
// built-in local-hostpath connection that declares no
// proxy.perDriver.topology. A local-hostpath connection whose base path is
// shared storage declares where it is reachable, and is not node-local
// (SPEC §12).
func (c *Connection) NodeLocal() bool { return IsNodeLocal(c.Config) }

// IsNodeLocal is NodeLocal for a parsed connection file (check and serve
// use it before any connection is loaded).
func IsNodeLocal(cfg *config.Connection) bool {
	return cfg != nil && cfg.Driver == config.DriverLocalHostpath && len(cfg.Proxy.PerDriver.Topology) == 0
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
		if cfg, _, err := config.ParseConnection(s.src.Describe(n), data, s.opts.Topology); err == nil && IsNodeLocal(cfg) {
			out = append(out, n)
		}
	}
	return out
}
