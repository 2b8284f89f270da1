package migrate

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// mapping is a YAML mapping node kept as written: the user's driver
// configs, topology and classes are carried node by node, so scalars
// (0777, "0777", 1e3) and comments reach the chart's values unchanged.
type mapping struct{ node *yaml.Node }

func newMapping() *mapping { return &mapping{node: &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}} }

// parseMapping parses a YAML document whose top is a mapping.
func parseMapping(b []byte) (*mapping, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("not YAML: %v", err)
	}
	if len(doc.Content) == 0 {
		return nil, errors.New("empty")
	}
	n := doc.Content[0]
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("a YAML mapping, not %s", kindName(n))
	}
	return &mapping{node: n}, nil
}

// get follows keys through nested mappings; nil when any is absent.
func (m *mapping) get(keys ...string) *yaml.Node {
	if m == nil {
		return nil
	}
	n := m.node
	for _, k := range keys {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
			}
		}
		n = next
	}
	return n
}

func (m *mapping) keys() []string {
	if m == nil || m.node == nil || m.node.Kind != yaml.MappingNode {
		return nil
	}
	var out []string
	for i := 0; i+1 < len(m.node.Content); i += 2 {
		out = append(out, m.node.Content[i].Value)
	}
	return out
}

// set appends key with v (a *yaml.Node as it is, anything else encoded).
func (m *mapping) set(key string, v any) {
	n, ok := v.(*yaml.Node)
	if !ok {
		n = &yaml.Node{}
		if err := n.Encode(v); err != nil {
			panic(fmt.Sprintf("migrate: encoding %s: %v", key, err)) // only this package's own values reach here
		}
	}
	m.node.Content = append(m.node.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, n)
}

func scalar(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return ""
	}
	return n.Value
}

func kindName(n *yaml.Node) string {
	switch {
	case n == nil:
		return "nothing"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Tag == "!!null":
		return "null"
	default:
		return fmt.Sprintf("%q", n.Value)
	}
}

// Keys of democratic-csi's chart values that migrate reads; every other
// key under controller and node is named as not carried.
var (
	carriedSide = []string{"extraVolumes", "driver"}
	carriedDrv  = []string{"extraVolumeMounts", "extraEnv", "image"}
)

// workloads carries what the chart's controller and node keys share with
// democratic-csi's: the extra volumes, mounts and env of the proxy
// container (a file or env source of a node rule needs them) without the
// connections volume the chart mounts itself, and the external
// provisioner's topology flags.
func (r *Result) workloads(file string, values, proxyCfg *mapping) (controller, node *mapping) {
	folder := strings.TrimSuffix(scalar(proxyCfg.get("proxy", "configFolder")), "/")
	controller, node = newMapping(), newMapping()
	for _, side := range []string{"controller", "node"} {
		out := controller
		if side == "node" {
			out = node
		}
		sm := &mapping{node: values.get(side)}
		drv := newMapping()
		for _, k := range sm.keys() {
			switch {
			case k == "externalProvisioner" && side == "controller":
				r.provisionerArgs(file, &mapping{node: sm.get(k)}, out)
			case k == "extraVolumes":
				if l := r.withoutConnections(file, side+"."+k, sm.get(k), folder, "name"); l != nil {
					out.set(k, l)
				}
			case k == "driver":
				dm := &mapping{node: sm.get(k)}
				for _, dk := range dm.keys() {
					switch dk {
					case "extraVolumeMounts":
						if l := r.withoutConnections(file, side+".driver."+dk, dm.get(dk), folder, "mountPath"); l != nil {
							drv.set(dk, l)
						}
					case "extraEnv":
						drv.set(dk, dm.get(dk))
					case "image":
						// The image that ran the connections' drivers runs
						// them as upstreams (the democraticCsi preset's
						// image), when it is one string.
						if img := scalar(dm.get(dk)); img != "" && r.image == "" {
							r.image = img
						}
					default:
						r.notef("%s: %s.driver.%s: not carried (this chart sets its own proxy container)", file, side, dk)
					}
				}
			case k == "strategy" && side == "controller":
				// democratic-csi's chart runs the controller in the node
				// DaemonSet with strategy node: the node-local mode here.
				if st := scalar(sm.get(k)); st == "node" {
					r.strategyNode = true
				} else if st != "deployment" && st != "" {
					r.notef("%s: controller.strategy %s: not carried (democratic-csi's chart knows deployment and node)", file, st)
				}
			case slices.Contains(carriedSide, k):
			default:
				r.notef("%s: %s.%s: not carried (the chart's %s keys are in its values.yaml; set it there if you need it)", file, side, k, side)
			}
		}
		if len(drv.node.Content) > 0 {
			out.set("driver", drv.node)
		}
	}
	return controller, node
}

// withoutConnections copies a list of volumes or mounts without the
// connections Secret's (named connections, or mounted at the proxy's
// configFolder): the chart mounts its own.
func (r *Result) withoutConnections(file, key string, l *yaml.Node, folder, field string) *yaml.Node {
	if l == nil || l.Kind != yaml.SequenceNode {
		if l != nil && l.Tag != "!!null" {
			r.errorf("%s: %s: a list, not %s", file, key, kindName(l))
		}
		return nil
	}
	out := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, e := range l.Content {
		em := &mapping{node: e}
		name, mp := scalar(em.get("name")), strings.TrimSuffix(scalar(em.get("mountPath")), "/")
		if name == "connections" || folder != "" && path.Clean(mp) == path.Clean(folder) && mp != "" {
			continue
		}
		out.Content = append(out.Content, e)
		r.notef("%s: %s: %s carried as it is", file, key, or(name, mp))
	}
	if len(out.Content) == 0 {
		return nil
	}
	return out
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// provisionerArgs maps democratic-csi's topology flags of the
// external-provisioner (its proxy-topology docs) to the chart's keys; the
// chart always enables the Topology feature gate.
func (r *Result) provisionerArgs(file string, ep *mapping, controller *mapping) {
	p := newMapping()
	var extra []string
	for _, k := range ep.keys() {
		if k != "extraArgs" {
			r.notef("%s: controller.externalProvisioner.%s: not carried (the chart runs its own csi-provisioner)", file, k)
			continue
		}
		l := ep.get(k)
		if l == nil || l.Kind != yaml.SequenceNode {
			continue
		}
		for _, a := range l.Content {
			arg := scalar(a)
			flag, val, hasVal := strings.Cut(arg, "=")
			switch flag {
			case "--feature-gates":
				if val != "Topology=true" {
					extra = append(extra, arg)
				}
			case "--strict-topology", "--immediate-topology":
				b := !hasVal || val == "true"
				if hasVal && val != "true" && val != "false" {
					r.errorf("%s: controller.externalProvisioner.extraArgs: %s: the value is true or false", file, arg)
					continue
				}
				key := "strictTopology"
				if flag == "--immediate-topology" {
					key = "immediateTopology"
				}
				p.set(key, b)
			default:
				extra = append(extra, arg)
			}
		}
	}
	if len(extra) > 0 {
		p.set("extraArgs", extra)
		r.notef("%s: controller.externalProvisioner.extraArgs %s carried as they are (after the chart's flags)", file, strings.Join(extra, " "))
	}
	if len(p.node.Content) > 0 {
		controller.set("externalProvisioner", p.node)
	}
}
