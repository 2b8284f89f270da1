package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/endpoint"
)

// Connection is one <name>.yaml in the connection folder.
//
// It is decoded as the main config is (decodeNode, then koanf); the keys
// with dots of its maps (parameters, extra labels) stay whole.
type Connection struct {
	// Driver is "csi" (forward to an external CSI driver) or
	// "local-hostpath" (built in). "proxy" is refused: no proxy-on-proxy.
	Driver        string         `koanf:"driver"`
	CSI           CSIUpstream    `koanf:"csi"`
	LocalHostpath LocalHostpath  `koanf:"local-hostpath"`
	Proxy         ConnectionPlus `koanf:"proxy"`
}

// CSIUpstream configures driver: csi.
type CSIUpstream struct {
	// Endpoint is the controller-side upstream: unix:///path or host:port.
	Endpoint string `koanf:"endpoint"`
	// NodeEndpoint is the node-side upstream; empty means Endpoint.
	NodeEndpoint string `koanf:"nodeEndpoint"`
	// Timeout caps each upstream call; 0 means the caller's deadline only.
	Timeout time.Duration `koanf:"timeout"`
	// Parameters are defaults under the StorageClass parameters (the
	// StorageClass wins).
	Parameters map[string]string `koanf:"parameters"`
	// Secrets are defaults under the request's secrets (the request wins).
	Secrets map[string]string `koanf:"secrets"`
}

// ConnectionPlus is the proxy section of a connection file.
type ConnectionPlus struct {
	PerDriver PerDriver `koanf:"perDriver"`
}

// PerDriver holds proxy settings for this connection.
type PerDriver struct {
	// Topology lists where this connection's storage is reachable; empty
	// means everywhere.
	Topology []accessible.Entry `koanf:"topology"`
	// UpstreamTopology maps the keys of the upstream's accessible_topology
	// to this proxy's keys (SPEC §13): upstream key -> proxy key, short
	// proxy keys get the prefix. Empty: an upstream answering topology is
	// refused unless it cannot widen (SPEC §8).
	UpstreamTopology map[string]string `koanf:"upstreamTopology"`
	// NodeID translates the CO's node id (the node name) into the id this
	// connection's upstream expects in ControllerPublish/Unpublish.
	NodeID NodeIDTemplate `koanf:"nodeId"`
}

// NodeIDTemplate renders an upstream node id.
type NodeIDTemplate struct {
	// Template is text with {nodeName} placeholders, e.g.
	// "iqn.2000-01.com.example:{nodeName}". Empty means "{nodeName}".
	Template string `koanf:"template"`
}

// NodeNamePlaceholder is replaced by the node name in NodeIDTemplate.
const NodeNamePlaceholder = "{nodeName}"

// Render returns the upstream node id for nodeName.
func (t NodeIDTemplate) Render(nodeName string) string {
	if t.Template == "" {
		return nodeName
	}
	return strings.ReplaceAll(t.Template, NodeNamePlaceholder, nodeName)
}

// Parse inverts Render for ids the upstream reports back (ListVolumes'
// published_node_ids); ok is false when id does not have the template's
// shape.
func (t NodeIDTemplate) Parse(id string) (nodeName string, ok bool) {
	tpl := t.Template
	if tpl == "" {
		return id, true
	}
	before, after, found := strings.Cut(tpl, NodeNamePlaceholder)
	if !found || strings.Contains(after, NodeNamePlaceholder) {
		return "", false
	}
	if len(id) < len(before)+len(after) || !strings.HasPrefix(id, before) || !strings.HasSuffix(id, after) {
		return "", false
	}
	return id[len(before) : len(id)-len(after)], true
}

// NodeSideEndpoint is the endpoint node calls go to.
func (c *CSIUpstream) NodeSideEndpoint() string {
	if c.NodeEndpoint != "" {
		return c.NodeEndpoint
	}
	return c.Endpoint
}

// ParseConnection decodes and validates one connection file. file is used in
// messages only. Unknown keys are returned as warnings.
func ParseConnection(file string, data []byte, topo accessible.Options) (*Connection, []string, error) {
	doc, dec, err := decodeDocument(file, data)
	if err != nil {
		return nil, nil, err
	}
	return parseConnection(file, data, doc, dec, topo)
}

// parseConnection is ParseConnection of the file's first document, already
// decoded by dec (decodeDocument), which must hold no second one.
func parseConnection(file string, data []byte, doc *yaml.Node, dec *yaml.Decoder, topo accessible.Options) (*Connection, []string, error) {
	var c Connection
	d := decodeNode(doc, &c, decodeRules{secret: "csi.secrets"})
	if err := firstErrors(d.shapeErrors(nil), d.yamlErrors()); err != nil {
		// yaml.v3 quotes values in its own messages; those of csi.secrets
		// are hidden.
		return nil, nil, fmt.Errorf("file %s: %s", file, hideSecrets(err.Error(), data))
	}
	if err := noSecondDocument(file, dec); err != nil {
		return nil, nil, err
	}
	warnings, unknownProxy := d.unknownKeys("file " + file)
	if err := errors.Join(append(unknownProxy, c.Validate(topo))...); err != nil {
		return nil, warnings, fmt.Errorf("file %s: %w", file, err)
	}
	return &c, warnings, nil
}

// Validate checks the connection; errors name the key path.
func (c *Connection) Validate(topo accessible.Options) error {
	var errs []error
	add := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, a...)))
	}
	switch c.Driver {
	case DriverCSI:
		if c.CSI.Endpoint == "" {
			add("csi.endpoint", "required for driver: csi")
		} else if err := ValidateEndpoint(c.CSI.Endpoint); err != nil {
			add("csi.endpoint", "%v", err)
		}
		if c.CSI.NodeEndpoint != "" {
			if err := ValidateEndpoint(c.CSI.NodeEndpoint); err != nil {
				add("csi.nodeEndpoint", "%v", err)
			}
		}
		if c.CSI.Timeout < 0 {
			add("csi.timeout", "%s is negative", c.CSI.Timeout)
		}
		if _, ok := c.CSI.Parameters["connection"]; ok {
			add("csi.parameters.connection", "is reserved for the proxy and never sent upstream")
		}
	case DriverLocalHostpath:
		if p := c.LocalHostpath.ShareBasePath; p == "" || !filepath.IsAbs(p) {
			add("local-hostpath.shareBasePath", "must be an absolute path, got %q", p)
		}
	case DriverProxy:
		add("driver", "proxy is only valid in the main config (a connection cannot be another proxy)")
	case "":
		add("driver", "required (csi, local-hostpath or group)")
	default:
		add("driver", "%q is not one of csi, local-hostpath, group", c.Driver)
	}
	if tpl := c.Proxy.PerDriver.NodeID.Template; tpl != "" {
		rest := strings.ReplaceAll(tpl, NodeNamePlaceholder, "")
		if i := strings.IndexAny(rest, "{}"); i >= 0 {
			add("proxy.perDriver.nodeId.template", "%q: only the %s placeholder is supported", tpl, NodeNamePlaceholder)
		}
	}
	if err := accessible.Validate(c.Proxy.PerDriver.Topology, topo); err != nil {
		errs = append(errs, err)
	}
	if m := c.Proxy.PerDriver.UpstreamTopology; len(m) > 0 {
		if c.Driver == DriverLocalHostpath {
			add("proxy.perDriver.upstreamTopology", "is only for driver: csi (the built-in local-hostpath answers no topology of its own)")
		} else if err := accessible.ValidateUpstream(m, c.Proxy.PerDriver.Topology, topo); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Topology is what the file says about where the connection's volumes
// are, for accessible.CompileSpec.
func (c *Connection) Topology() accessible.Spec {
	return accessible.Spec{
		Entries:  c.Proxy.PerDriver.Topology,
		Upstream: c.Proxy.PerDriver.UpstreamTopology,
		Builtin:  c.Driver == DriverLocalHostpath,
	}
}

// ValidateEndpoint accepts what a connection file may name as an upstream:
// unix:///absolute/path (also unix:/absolute/path) or host:port, checked as
// pkg/endpoint checks them.
func ValidateEndpoint(ep string) error {
	_, err := endpoint.Parse(ep, endpoint.Upstream)
	return err
}

// hideSecrets removes the values under csi.secrets from a decode error.
// yaml.v3 quotes the offending value in type errors ("cannot unmarshal
// !!str `pw=hunter2` into map[string]string"), and a decode error is
// logged and returned to the CO, which shows it in events.
func hideSecrets(msg string, data []byte) string {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil {
		return msg // a syntax error: yaml.v3 quotes no values in those
	}
	var values []string
	seen := map[*yaml.Node]bool{} // an alias may point at its own ancestor
	var collect func(n *yaml.Node)
	collect = func(n *yaml.Node) {
		if n == nil || seen[n] {
			return
		}
		seen[n] = true
		switch n.Kind {
		case yaml.ScalarNode:
			values = append(values, n.Value)
		case yaml.MappingNode:
			for i := 1; i < len(n.Content); i += 2 {
				collect(n.Content[i])
			}
		case yaml.SequenceNode, yaml.DocumentNode:
			for _, c := range n.Content {
				collect(c)
			}
		case yaml.AliasNode:
			collect(n.Alias)
		}
	}
	if n := mappingValue(mappingValue(&doc, "csi"), "secrets"); n != nil {
		collect(n)
	}
	for _, v := range values {
		if v == "" {
			continue
		}
		// yaml.v3 shows a value of up to 10 bytes whole and a longer one
		// as its first 7 bytes and "...".
		msg = strings.ReplaceAll(msg, "`"+v+"`", "`(secret)`")
		if len(v) > 10 {
			msg = strings.ReplaceAll(msg, "`"+v[:7]+"...`", "`(secret)`")
		}
	}
	return msg
}
