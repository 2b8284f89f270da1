package migrate

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/democratic-csi/proxy-topology/pkg/ids"
)

// Prefix is one handle prefix of the existing objects and what serves it
// after the switch.
type Prefix struct {
	// Prefix is "v:<connection>/" or "s:<connection>/"; empty for
	// handles that are not the proxy's.
	Prefix     string
	Connection string
	// Objects names the PersistentVolumes or VolumeSnapshotContents.
	Objects []string
	// Served is nil when nothing serves the prefix; Why then says why.
	Served *Served
	Why    string
}

// CheckReport is the answer of Check.
type CheckReport struct {
	Prefixes []Prefix
	// OtherDrivers counts the objects of other CSI drivers (not
	// concerned by the switch).
	OtherDrivers int
}

// Unserved counts the objects nothing serves after the switch.
func (c *CheckReport) Unserved() int {
	n := 0
	for _, p := range c.Prefixes {
		if p.Served == nil {
			n += len(p.Objects)
		}
	}
	return n
}

// Check reads a `kubectl get pv -o json` (or -o yaml) list, or one of
// VolumeSnapshotContents, and says for each handle prefix of csiName's
// objects which connection serves it after the switch.
func Check(file string, b []byte, csiName string, conns map[string]Served) (*CheckReport, error) {
	var list struct {
		Kind  string           `json:"kind"`
		Items []map[string]any `json:"items"`
	}
	if err := yaml.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("%s: not a kubectl get -o json list: %v", file, err)
	}
	if list.Kind != "List" && !strings.HasSuffix(list.Kind, "List") {
		var one map[string]any
		if err := yaml.Unmarshal(b, &one); err != nil || one["kind"] == nil {
			return nil, fmt.Errorf("%s: kind %q: give kubectl get pv -o json (a List)", file, list.Kind)
		}
		list.Items = []map[string]any{one}
	}
	byPrefix := map[string]*Prefix{}
	rep := &CheckReport{}
	for i, it := range list.Items {
		kind, _ := it["kind"].(string)
		name, _ := dig(it, "metadata", "name").(string)
		var driver, handle string
		var k ids.Kind
		switch kind {
		case "PersistentVolume":
			if dig(it, "spec", "csi") == nil {
				rep.OtherDrivers++
				continue
			}
			driver, _ = dig(it, "spec", "csi", "driver").(string)
			handle, _ = dig(it, "spec", "csi", "volumeHandle").(string)
			k = ids.Volume
		case "VolumeSnapshotContent":
			driver, _ = dig(it, "spec", "driver").(string)
			handle, _ = dig(it, "status", "snapshotHandle").(string)
			if handle == "" {
				handle, _ = dig(it, "spec", "source", "snapshotHandle").(string)
			}
			k = ids.Snapshot
		default:
			return nil, fmt.Errorf("%s: items[%d] is a %q; give PersistentVolumes or VolumeSnapshotContents", file, i, kind)
		}
		if driver != csiName {
			rep.OtherDrivers++
			continue
		}
		obj := kind + "/" + name
		id, err := ids.Parse(k, handle)
		if err != nil {
			p := byPrefix[""]
			if p == nil {
				p = &Prefix{Why: fmt.Sprintf("not a handle of the proxy (%c:<connection>/<handle>): proxy-topology refuses it", k)}
				byPrefix[""] = p
			}
			p.Objects = append(p.Objects, fmt.Sprintf("%s (%q)", obj, handle))
			continue
		}
		pre := fmt.Sprintf("%c:%s/", k, id.Connection)
		p := byPrefix[pre]
		if p == nil {
			p = &Prefix{Prefix: pre, Connection: id.Connection}
			if s, ok := conns[id.Connection]; ok {
				p.Served = &s
			} else {
				p.Why = fmt.Sprintf("no connection %s among the connections given: its calls would fail with FAILED_PRECONDITION", id.Connection)
			}
			byPrefix[pre] = p
		}
		p.Objects = append(p.Objects, obj)
	}
	for _, k := range slices.Sorted(maps.Keys(byPrefix)) {
		rep.Prefixes = append(rep.Prefixes, *byPrefix[k])
	}
	return rep, nil
}

func dig(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

// Lines renders the report, one line per prefix.
func (c *CheckReport) Lines() []string {
	var out []string
	for _, p := range c.Prefixes {
		n := fmt.Sprintf("%d object%s", len(p.Objects), map[bool]string{true: "", false: "s"}[len(p.Objects) == 1])
		switch {
		case p.Served != nil:
			nl := ""
			if p.Served.NodeLocal {
				nl = ", node-local"
			}
			out = append(out, fmt.Sprintf("%-24s %s: served by connection %s, upstreams.%s (democratic-csi %s%s)", p.Prefix, n, p.Connection, p.Served.Upstream, p.Served.Driver, nl))
		case p.Prefix == "":
			out = append(out, fmt.Sprintf("%-24s %s NOT SERVED: %s: %s", "(no prefix)", n, p.Why, strings.Join(p.Objects, ", ")))
		default:
			out = append(out, fmt.Sprintf("%-24s %s NOT SERVED: %s: %s", p.Prefix, n, p.Why, strings.Join(p.Objects, ", ")))
		}
	}
	if c.OtherDrivers > 0 {
		out = append(out, fmt.Sprintf("%d object(s) of other drivers: not concerned by the switch", c.OtherDrivers))
	}
	return out
}
