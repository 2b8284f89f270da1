package nodetopology

import "github.com/democratic-csi/proxy-topology/pkg/accessible"

// Node topology types (proxy.nodeTopology.type).
const (
	TypeCluster = "cluster"
	TypeNode    = accessible.TypeNode
	TypeZone    = "zone"
	TypeCustom  = "custom" // accepted as zone
)

// Rule sources (proxy.nodeTopology.fromRegexp[].source).
const (
	SourceNodeName  = "nodeName"
	SourceHostname  = "hostname"
	SourceEnv       = "env"
	SourceFile      = "file"
	SourceNodeLabel = "nodeLabel"
)

// Config is proxy.nodeTopology from the main config.
type Config struct {
	// Type selects the base segment: cluster (<prefix>/cluster=local),
	// node (<prefix>/node=<node name>) or zone/custom (none, rules only).
	// Empty means cluster.
	Type string `koanf:"type" yaml:"type"`
	// Prefix is prepended as "<prefix>/" to short keys. Empty means
	// DefaultPrefix.
	Prefix string `koanf:"prefix" yaml:"prefix"`
	// FromRegexp rules are evaluated in order; the first rule that yields a
	// value for a key wins, so later rules act as fallbacks.
	FromRegexp []Rule `koanf:"fromRegexp" yaml:"fromRegexp"`
}

// DefaultPrefix is used when Config.Prefix is empty.
const DefaultPrefix = "org.democratic-csi.topology"

// Rule is one proxy.nodeTopology.fromRegexp entry.
type Rule struct {
	// TopologyKey is the short key (prefixed) or, if it contains '/', the
	// full label key used verbatim.
	TopologyKey string `koanf:"topologyKey" yaml:"topologyKey"`
	// Source is one of nodeName, hostname, env, file, nodeLabel.
	Source string `koanf:"source" yaml:"source"`
	// EnvName names the env var for source env.
	EnvName string `koanf:"envName" yaml:"envName"`
	// File is the path for source file; its content is trimmed of trailing
	// whitespace.
	File string `koanf:"file" yaml:"file"`
	// Label is the node label key for source nodeLabel.
	Label string `koanf:"label" yaml:"label"`
	// Regex is ECMAScript syntax (regexp2) and implicitly anchored ^(?:…)$.
	// Empty means "(.*)".
	Regex string `koanf:"regex" yaml:"regex"`
	// Template renders the value: {match:N}, ${match:N}, {match:name}.
	// Empty means "{match:0}".
	Template string `koanf:"template" yaml:"template"`
}
