// Package migrate converts a deployment of democratic-csi's proxy driver
// into values of this project's Helm chart (deploy/helm/proxy-topology),
// and says which connection serves each existing volume after the switch
// (docs/migration.md, SPEC §15).
//
// It is pure: Convert takes the bytes of the files a democratic-csi user
// has (the Helm values or the bare proxy config, and the connection files)
// and returns the chart's values, the notes on what it carried differently
// or not at all, and the refusals. Reading a folder or a Secret manifest
// is in source.go.
package migrate

import (
	"bytes"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/democratic-csi/proxy-topology/pkg/ids"
)

// Input is what a user of democratic-csi's proxy has.
type Input struct {
	// ValuesName names the values file in messages; Values is its text:
	// democratic-csi's Helm values (csiDriver.name, driver.config with the
	// proxy config) or the bare proxy config (driver: proxy).
	ValuesName string
	Values     []byte
	// CSIName is the CSI driver name when Values does not say it (a bare
	// proxy config); when both are given they must agree.
	CSIName string
	// ConnectionsName names the folder or Secret in messages;
	// Connections maps each connection name to its file's text.
	ConnectionsName string
	Connections     map[string][]byte
}

// Served says what serves a connection after the switch.
type Served struct {
	// Upstream is the chart's upstreams.<name> entry.
	Upstream string
	// Driver is democratic-csi's driver of the connection.
	Driver string
	// NodeLocal: the connection's volumes live on one node each.
	NodeLocal bool
}

// Result is the conversion.
type Result struct {
	// Values is the chart's values file; nil when Errors is not empty.
	Values []byte
	// CSIName is the CSI driver name, the same before and after.
	CSIName string
	// Notes name what is carried differently or not at all, and what the
	// user must do by hand; none of them stops the switch.
	Notes []string
	// Errors are refusals: a driver that cannot run as an upstream, a
	// file that does not parse, a value the chart would refuse.
	Errors []string
	// Connections maps each connection name to what serves it.
	Connections map[string]Served
	// image is democratic-csi's image of the old release, when its values
	// give it as one string.
	image string
	// strategyNode: democratic-csi's controller.strategy is node (its
	// controller runs in every node plugin).
	strategyNode bool
	// NodeLocal lists the node-local connections (the values then use
	// the chart's node-local mode).
	NodeLocal []string
}

func (r *Result) notef(format string, a ...any) { r.Notes = append(r.Notes, fmt.Sprintf(format, a...)) }
func (r *Result) errorf(format string, a ...any) {
	r.Errors = append(r.Errors, fmt.Sprintf(format, a...))
}

// chartDefaultPrefix is the prefix both proxies use when none is given.
const chartDefaultPrefix = "org.democratic-csi.topology"

// upstreamName is the chart's rule for upstreams.<name> (_upstreams.tpl):
// it names a container and volumes as well as the connection.
var upstreamName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,45}[a-z0-9])?$`)

// Convert converts in. Every problem is reported, not only the first.
func Convert(in Input) *Result {
	r := &Result{Connections: map[string]Served{}}
	values, proxyCfg, ok := r.readValues(in)
	if !ok {
		return r
	}
	out := newMapping()
	csiDriver := newMapping()
	csiDriver.set("name", r.CSIName)
	for _, k := range []string{"attachRequired", "podInfoOnMount", "storageCapacity", "fsGroupPolicy", "volumeLifecycleModes"} {
		if n := values.get("csiDriver", k); n != nil {
			csiDriver.set(k, n)
		}
	}
	var unset []string
	for k, def := range map[string]string{"attachRequired": "false", "podInfoOnMount": "false", "storageCapacity": "true", "fsGroupPolicy": "ReadWriteOnceWithFSType"} {
		if values.get("csiDriver", k) == nil {
			unset = append(unset, k+" "+def)
		}
	}
	if len(unset) > 0 {
		slices.Sort(unset)
		r.notef("%s: csiDriver: %s are the chart's defaults, not in the values: compare them with the CSIDriver object (kubectl get csidriver %s -o yaml) and set them in the values where it differs; its immutable fields make the install fail otherwise", in.ValuesName, strings.Join(unset, ", "), r.CSIName)
	}
	out.set("csiDriver", csiDriver.node)
	out.set("config", r.convertProxyConfig(in.ValuesName, proxyCfg))

	if len(in.Connections) == 0 {
		r.errorf("%s: no connection files (<name>.yaml); migrate converts the connections democratic-csi's proxy serves", in.ConnectionsName)
	}
	controller, node := r.workloads(in.ValuesName, values, proxyCfg)
	upstreams := newMapping()
	connections := newMapping()
	used := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(in.Connections)) {
		r.convertConnection(in, name, upstreams, connections, used)
	}
	nodeLocalMode := len(r.NodeLocal) > 0 || r.strategyNode
	if nodeLocalMode {
		if dropped := controller.keys(); len(dropped) > 0 {
			r.notef("%s: controller.%s: not carried: the node-local mode has no controller Deployment (its provisioner is nodeLocal.externalProvisioner)", in.ValuesName, strings.Join(dropped, ", controller."))
		}
	}
	if len(r.NodeLocal) == 0 && r.strategyNode {
		out.set("nodeLocal", map[string]any{"enabled": true})
		controller = newMapping()
		controller.set("enabled", false)
		r.notef("%s: controller.strategy node: the values use the chart's node-local mode (nodeLocal.enabled: true, controller.enabled: false), where every node plugin serves the controller service (SPEC §12)", in.ValuesName)
	}
	if len(r.NodeLocal) > 0 {
		out.set("nodeLocal", map[string]any{"enabled": true})
		controller = newMapping()
		controller.set("enabled", false)
		others := []string{}
		for name := range r.Connections {
			if !slices.Contains(r.NodeLocal, name) {
				others = append(others, name)
			}
		}
		slices.Sort(others)
		if typ := topologyType(out); typ != "node" {
			r.notef("%s: proxy.nodeTopology.type %s: democratic-csi's local drivers need type node (its docs): under %s its nodes never carried %s/node, the key of those volumes' node affinity; in the node-local mode proxy-topology's nodes report it", in.ValuesName, typ, typ, prefixOf(out))
		}
		r.notef("%s node-local (volumes live on the node that made them): the values use the chart's node-local mode (nodeLocal.enabled: true, controller.enabled: false), in which every node plugin serves the controller service with its own csi-provisioner and csi-snapshotter (SPEC §12); snapshots then need a snapshot-controller run with --enable-distributed-snapshotting, and there is no csi-resizer in that mode", names(r.NodeLocal, "is", "are"))
		if len(others) > 0 {
			r.notef("%s not node-local but share the node-local release (one CSI driver name is one release): their claims cannot be expanded in that mode", names(others, "is", "are"))
		}
	}
	if len(controller.node.Content) > 0 {
		out.set("controller", controller.node)
	}
	if len(node.node.Content) > 0 {
		out.set("node", node.node)
	}
	if len(connections.node.Content) > 0 {
		out.set("connections", connections.node)
	}
	out.set("upstreams", upstreams.node)
	for _, k := range []string{"storageClasses", "volumeSnapshotClasses"} {
		n := values.get(k)
		if n == nil || n.Kind != yaml.SequenceNode {
			if n != nil && n.Tag != "!!null" {
				r.errorf("%s: %s: a list (democratic-csi's chart's), not %s", in.ValuesName, k, kindName(n))
			}
			out.set(k, []any{})
			if k == "storageClasses" {
				r.notef("%s: no storageClasses: the StorageClasses you have stay as they are, with provisioner %s and parameters.connection (the chart's example classes are not rendered)", in.ValuesName, r.CSIName)
			}
			continue
		}
		out.set(k, n)
		if k == "storageClasses" {
			r.checkClasses(in.ValuesName, n)
		}
	}
	if len(r.Errors) > 0 {
		return r
	}
	var b bytes.Buffer
	b.WriteString(header(in))
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(out.node); err != nil {
		r.errorf("writing the values: %v", err)
		return r
	}
	r.Values = b.Bytes()
	return r
}

func header(in Input) string {
	return fmt.Sprintf("# proxy-topology chart values written by `proxy-topology migrate` from\n# %s and %s (democratic-csi's proxy driver). docs/migration.md.\n", in.ValuesName, in.ConnectionsName)
}

// readValues finds the proxy config in in.Values: under driver.config of
// democratic-csi's Helm values, or the whole file.
func (r *Result) readValues(in Input) (values, proxyCfg *mapping, ok bool) {
	root, err := parseMapping(in.Values)
	if err != nil {
		r.errorf("%s: %v", in.ValuesName, err)
		return nil, nil, false
	}
	values = root
	switch d := root.get("driver"); {
	case d != nil && d.Kind == yaml.MappingNode:
		dm := &mapping{node: d}
		for _, k := range dm.keys() {
			switch k {
			case "config":
			case "existingConfigSecret":
				r.errorf("%s: driver.existingConfigSecret: the proxy config is in Secret %s, not in these values; give that Secret's driver-config-file.yaml as --values (kubectl get secret %s -o jsonpath='{.data.driver-config-file\\.yaml}' | base64 -d)", in.ValuesName, scalar(dm.get(k)), scalar(dm.get(k)))
			default:
				r.notef("%s: driver.%s: not carried (this chart runs its own proxy container)", in.ValuesName, k)
			}
		}
		c := dm.get("config")
		if c == nil || c.Kind != yaml.MappingNode {
			if !slices.Contains(dm.keys(), "existingConfigSecret") {
				r.errorf("%s: driver.config: missing (democratic-csi's driver config, with driver: proxy)", in.ValuesName)
			}
			return nil, nil, false
		}
		proxyCfg = &mapping{node: c}
		if n := root.get("csiDriver", "name"); n != nil {
			r.CSIName = scalar(n)
		}
	case d != nil && d.Kind == yaml.ScalarNode:
		// A bare proxy config: it does not name the CSI driver.
		proxyCfg, values = root, newMapping()
	default:
		r.errorf("%s: neither democratic-csi's Helm values (driver.config) nor a proxy config (driver: proxy)", in.ValuesName)
		return nil, nil, false
	}
	switch {
	case r.CSIName == "" && in.CSIName == "":
		r.errorf("%s: no csiDriver.name: give the CSI driver name of the deployment (kubectl get csidriver) with --csi-name; it must stay the same", in.ValuesName)
	case r.CSIName == "":
		r.CSIName = in.CSIName
	case in.CSIName != "" && in.CSIName != r.CSIName:
		r.errorf("--csi-name %s differs from csiDriver.name %s of %s: the name must stay the same", in.CSIName, r.CSIName, in.ValuesName)
	}
	if drv := scalar(proxyCfg.get("driver")); drv != "proxy" {
		r.errorf("%s: driver %q: migrate converts democratic-csi's proxy driver (driver: proxy); a deployment of one driver is converted by writing it as the one connection of a proxy", in.ValuesName, drv)
		return nil, nil, false
	}
	return values, proxyCfg, len(r.Errors) == 0
}

// convertProxyConfig writes the chart's config: from democratic-csi's
// proxy config. democratic-csi's NodeGetInfo reports the rules' segments
// only under type zone; under cluster and node it reports the one base
// segment. This chart's proxy adds the rules' segments under every type
// (SPEC §7), so rules under cluster and node are dropped: the nodes then
// report exactly what they reported before.
func (r *Result) convertProxyConfig(file string, cfg *mapping) map[string]any {
	proxy := map[string]any{"configFolder": "/mnt/connections/"}
	pm := &mapping{node: cfg.get("proxy")}
	for _, k := range cfg.keys() {
		if k != "driver" && k != "proxy" {
			r.notef("%s: %s: not carried (not a key of democratic-csi's proxy config)", file, k)
		}
	}
	if pm.node == nil {
		r.errorf("%s: proxy: missing (democratic-csi's proxy needs proxy.configFolder)", file)
		return map[string]any{"driver": "proxy", "proxy": proxy}
	}
	// fromRegexp is always written: the chart's default rules (node
	// labels) would otherwise stay under Helm's merge of the values.
	topo := map[string]any{"type": "cluster", "prefix": chartDefaultPrefix, "fromRegexp": []any{}}
	for _, k := range pm.keys() {
		v := pm.get(k)
		switch k {
		case "configFolder":
			if s := scalar(v); s != "/mnt/connections/" && s != "/mnt/connections" {
				r.notef("%s: proxy.configFolder %s: the chart mounts the connections at /mnt/connections/ (and the controller watches the Secret)", file, s)
			}
		case "cacheTimeoutMinutes":
			proxy["cacheTimeoutMinutes"] = v
		case "nodeId":
			r.notef("%s: proxy.nodeId: not carried: proxy-topology's node id is the node name (democratic-csi's is n=<node name> and more); node ids are not stored in PVs, and the node plugin's registration rewrites CSINode", file)
		case "nodeTopology":
			r.convertNodeTopology(file, &mapping{node: v}, topo)
		default:
			r.notef("%s: proxy.%s: not carried (not a key of democratic-csi's proxy)", file, k)
		}
	}
	proxy["nodeTopology"] = topo
	return map[string]any{"driver": "proxy", "proxy": proxy}
}

var ruleKeys = []string{"topologyKey", "source", "envName", "file", "regex", "template"}

func (r *Result) convertNodeTopology(file string, nt *mapping, topo map[string]any) {
	if nt.node == nil || nt.node.Kind != yaml.MappingNode {
		r.errorf("%s: proxy.nodeTopology: a mapping, not %s", file, kindName(nt.node))
		return
	}
	typ := "cluster"
	if v := nt.get("type"); v != nil {
		typ = scalar(v)
	}
	switch typ {
	case "cluster", "node", "zone":
	case "custom":
		r.notef("%s: proxy.nodeTopology.type custom is written as zone (democratic-csi's NodeGetInfo refuses custom; zone is what its docs mean)", file)
		typ = "zone"
	default:
		r.errorf("%s: proxy.nodeTopology.type %q: democratic-csi knows cluster, node and zone", file, typ)
	}
	topo["type"] = typ
	if v := nt.get("prefix"); v != nil {
		topo["prefix"] = scalar(v)
	}
	for _, k := range nt.keys() {
		switch k {
		case "type", "prefix":
		case "fromRegexp":
			rules := nt.get(k)
			if rules.Kind != yaml.SequenceNode {
				r.errorf("%s: proxy.nodeTopology.fromRegexp: a list, not %s", file, kindName(rules))
				continue
			}
			if typ != "zone" {
				if len(rules.Content) > 0 {
					r.notef("%s: proxy.nodeTopology.fromRegexp: %d rules not carried: democratic-csi ignores them under type %s (its nodes report only %s/%s), and proxy-topology would add their segments; add them back after the switch if you want them", file, len(rules.Content), typ, topo["prefix"], typ)
				}
				continue
			}
			var out []any
			for i, rule := range rules.Content {
				rm := &mapping{node: rule}
				if rule.Kind != yaml.MappingNode {
					r.errorf("%s: proxy.nodeTopology.fromRegexp[%d]: a mapping, not %s", file, i, kindName(rule))
					continue
				}
				o := newMapping()
				for _, rk := range rm.keys() {
					if !slices.Contains(ruleKeys, rk) {
						r.notef("%s: proxy.nodeTopology.fromRegexp[%d].%s: not carried (not a key of democratic-csi's rules)", file, i, rk)
						continue
					}
					o.set(rk, rm.get(rk))
				}
				if scalar(rm.get("topologyKey")) == "" {
					r.errorf("%s: proxy.nodeTopology.fromRegexp[%d].topologyKey: missing (democratic-csi refuses the rule)", file, i)
				}
				if src := scalar(rm.get("source")); src == "file" {
					r.notef("%s: proxy.nodeTopology.fromRegexp[%d] reads file %s: mount it into the node plugin (node.extraVolumes and node.driver.extraVolumeMounts are carried); proxy-topology trims the file's trailing whitespace, democratic-csi did not", file, i, scalar(rm.get("file")))
				}
				out = append(out, o.node)
			}
			topo["fromRegexp"] = out
		case "customRules":
			r.notef("%s: proxy.nodeTopology.customRules: not carried: democratic-csi (bb0e3c3) never reads it (its rules are fromRegexp), so the nodes report the same segments without it", file)
		default:
			r.notef("%s: proxy.nodeTopology.%s: not carried (not a key of democratic-csi's proxy)", file, k)
		}
	}
}

// convertConnection writes upstreams.<name> (and connections.<name> when
// the connection's name cannot name an upstream) for connection name.
func (r *Result) convertConnection(in Input, name string, upstreams, connections *mapping, used map[string]string) {
	file := fmt.Sprintf("%s: connection %s", in.ConnectionsName, name)
	if err := ids.ValidateConnectionName(name); err != nil {
		r.errorf("%s: %v: proxy-topology cannot serve it, and a connection is never renamed (its name is in every volume handle)", file, err)
		return
	}
	root, err := parseMapping(in.Connections[name])
	if err != nil {
		r.errorf("%s: %v", file, err)
		return
	}
	driver := scalar(root.get("driver"))
	k, known := driverKinds[driver]
	switch {
	case driver == "":
		r.errorf("%s: driver: missing (democratic-csi's driver of the connection)", file)
		return
	case !known:
		r.errorf("%s: driver %s: not a democratic-csi driver migrate knows (%s)", file, driver, strings.Join(KnownDrivers(), ", "))
		return
	case k == kindUnsupported:
		r.errorf("%s: driver %s cannot run as an upstream of proxy-topology: %s", file, driver, unsupportedWhy[driver])
		return
	case driver == "proxy":
		r.errorf("%s: driver proxy: a proxy behind the proxy is refused", file)
		return
	}
	driverConfig := newMapping()
	var proxyPart *mapping
	for i := 0; i+1 < len(root.node.Content); i += 2 {
		key, val := root.node.Content[i], root.node.Content[i+1]
		if key.Value == "proxy" {
			proxyPart = &mapping{node: val}
			continue
		}
		driverConfig.node.Content = append(driverConfig.node.Content, key, val)
	}
	if k == kindLocalHostpath && scalar(root.get("local-hostpath", "shareBasePath")) == "" {
		r.errorf("%s: local-hostpath.shareBasePath: required (the host directory of its volumes; the chart mounts it)", file)
	}
	perDriver := newMapping()
	hasTopology := false
	if proxyPart != nil && proxyPart.node.Kind == yaml.MappingNode {
		for _, pk := range proxyPart.keys() {
			if pk != "perDriver" {
				r.notef("%s: proxy.%s: not carried (democratic-csi reads only proxy.perDriver of a connection)", file, pk)
				continue
			}
			pd := &mapping{node: proxyPart.get(pk)}
			if pd.node.Kind != yaml.MappingNode {
				r.errorf("%s: proxy.perDriver: a mapping, not %s", file, kindName(pd.node))
				continue
			}
			for _, dk := range pd.keys() {
				if dk != "topology" {
					r.notef("%s: proxy.perDriver.%s: not carried (democratic-csi reads only proxy.perDriver.topology)", file, dk)
					continue
				}
				t := pd.get(dk)
				if !r.checkTopology(file, t) {
					continue
				}
				perDriver.set("topology", t)
				hasTopology = len(t.Content) > 0
			}
		}
	} else if proxyPart != nil && proxyPart.node.Tag != "!!null" {
		r.errorf("%s: proxy: a mapping, not %s", file, kindName(proxyPart.node))
	}
	nodeLocal := k.nodeLocal() && !hasTopology
	if nodeLocal {
		// democratic-csi answers its node key with the node name; the
		// proxy reads it as its own <prefix>/node (SPEC §13).
		perDriver.set("upstreamTopology", map[string]any{dcsiNodeKey: "node"})
		r.NodeLocal = append(r.NodeLocal, name)
	} else if k.nodeLocal() {
		r.notef("%s: %s with proxy.perDriver.topology: carried as storage reachable where the topology says (democratic-csi's proxy replaced the driver's node answer by it), not as node-local", file, driver)
	}
	up := name
	if !upstreamName.MatchString(name) {
		up = derivedName(name, used)
	}
	if other, dup := used[up]; dup {
		r.errorf("%s: its upstream name %s is taken by connection %s", file, up, other)
		return
	}
	used[up] = name
	dcsi := newMapping()
	dcsi.set("driverConfig", driverConfig.node)
	if img := r.image; img != "" {
		dcsi.set("image", img)
	}
	entry := newMapping()
	entry.set("democraticCsi", dcsi.node)
	conn := newMapping()
	if len(perDriver.node.Content) > 0 {
		conn.set("proxy", map[string]any{"perDriver": perDriver.node})
	}
	if up == name {
		if len(conn.node.Content) > 0 {
			entry.set("connection", conn.node)
		}
	} else {
		// The chart names the upstream's connection after the entry;
		// the connection keeps its own name here, pointing at the
		// entry's socket. The chart also renders connection <up>, which
		// no StorageClass names.
		full := newMapping()
		full.set("driver", "csi")
		full.set("csi", map[string]any{"endpoint": "unix:///csi/upstreams/" + up + "/csi.sock"})
		if len(perDriver.node.Content) > 0 {
			full.set("proxy", map[string]any{"perDriver": perDriver.node})
		}
		connections.set(name, full.node)
		r.notef("%s: the name is not a valid upstreams.<name> (lower-case letters, digits and '-', at most 47): its container is upstreams.%s, and connections.%s keeps the connection's name pointing at it (the chart also renders an unused connection %s)", file, up, name, up)
	}
	upstreams.set(up, entry.node)
	r.Connections[name] = Served{Upstream: up, Driver: driver, NodeLocal: nodeLocal}
}

// checkTopology validates proxy.perDriver.topology as democratic-csi
// reads it: a list of entries each with requirements.
func (r *Result) checkTopology(file string, t *yaml.Node) bool {
	if t.Kind != yaml.SequenceNode {
		r.errorf("%s: proxy.perDriver.topology: a list, not %s", file, kindName(t))
		return false
	}
	ok := true
	for i, e := range t.Content {
		em := &mapping{node: e}
		if e.Kind != yaml.MappingNode || em.get("requirements") == nil {
			r.errorf("%s: proxy.perDriver.topology[%d]: requirements: missing (democratic-csi refuses such an entry)", file, i)
			ok = false
		}
	}
	return ok
}

// derivedName makes an upstreams.<name> from a connection name the chart's
// rule refuses.
func derivedName(name string, used map[string]string) string {
	b := []byte(strings.ToLower(name))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			b[i] = '-'
		}
	}
	s := strings.Trim(string(b), "-")
	if len(s) > 40 {
		s = strings.TrimRight(s[:40], "-")
	}
	if s == "" {
		s = "conn"
	}
	cand := s
	for i := 2; ; i++ {
		if _, taken := used[cand]; !taken {
			return cand
		}
		cand = fmt.Sprintf("%s-%d", s, i)
	}
}

func (r *Result) checkClasses(file string, classes *yaml.Node) {
	for i, c := range classes.Content {
		cm := &mapping{node: c}
		conn := scalar(cm.get("parameters", "connection"))
		name := scalar(cm.get("name"))
		if conn == "" {
			r.notef("%s: storageClasses[%d] (%s): no parameters.connection: its claims fail unless proxy.defaultConnection is set", file, i, name)
			continue
		}
		if _, ok := r.Connections[conn]; !ok {
			r.notef("%s: storageClasses[%d] (%s): connection %s is not among the connections given: its claims fail until it is added", file, i, name, conn)
		}
	}
}

// names is "connection a is" or "connections a, b are".
func names(l []string, one, many string) string {
	if len(l) == 1 {
		return "connection " + l[0] + " " + one
	}
	return "connections " + strings.Join(l, ", ") + " " + many
}

func topologyType(out *mapping) string {
	return scalar((&mapping{node: out.get("config")}).get("proxy", "nodeTopology", "type"))
}

func prefixOf(out *mapping) string {
	return scalar((&mapping{node: out.get("config")}).get("proxy", "nodeTopology", "prefix"))
}
