package migrate

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

func exampleInput(t *testing.T) Input {
	t.Helper()
	values, err := os.ReadFile("testdata/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	conns, skipped, err := ReadConnections("testdata/connections")
	if err != nil || len(skipped) > 0 {
		t.Fatal(err, skipped)
	}
	return Input{ValuesName: "values.yaml", Values: values, ConnectionsName: "connections/", Connections: conns}
}

func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatalf("the values do not parse: %v\n%s", err, b)
	}
	return m
}

func at(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		mm, _ := v.(map[string]any)
		v = mm[k]
	}
	return v
}

// TestExample converts democratic-csi's example proxy values (its
// docs/proxy-topology.md Helm values with examples/proxy.yaml as
// driver.config) and a local-hostpath, an NFS and an iSCSI connection.
func TestExample(t *testing.T) {
	res := Convert(exampleInput(t))
	if len(res.Errors) > 0 {
		t.Fatalf("refused: %v", res.Errors)
	}
	v := decode(t, res.Values)
	checks := []struct {
		path []string
		want any
	}{
		{[]string{"csiDriver", "name"}, "org.democratic-csi.proxy-topology"},
		{[]string{"config", "driver"}, "proxy"},
		{[]string{"config", "proxy", "nodeTopology"}, map[string]any{"type": "cluster", "prefix": "org.democratic-csi.topology", "fromRegexp": []any{}}},
		{[]string{"config", "proxy", "cacheTimeoutMinutes"}, float64(60)},
		{[]string{"nodeLocal", "enabled"}, true},
		{[]string{"controller", "enabled"}, false},
		{[]string{"upstreams", "local", "connection"}, map[string]any{"proxy": map[string]any{"perDriver": map[string]any{
			"upstreamTopology": map[string]any{"org.democratic-csi.topology/node": "node"}}}}},
		{[]string{"upstreams", "nfs-zone1", "connection", "proxy", "perDriver", "topology"}, []any{map[string]any{
			"requirements": map[string]any{"zone": "zone1"}, "extra": map[string]any{"storage.example.com/nfs": "true"}}}},
		{[]string{"upstreams", "iscsi", "connection", "proxy", "perDriver", "topology"}, []any{
			map[string]any{"requirements": map[string]any{"zone": "zone1"}}, map[string]any{"requirements": map[string]any{"zone": "zone2"}}}},
		{[]string{"upstreams", "iscsi", "democraticCsi", "driverConfig", "driver"}, "zfs-generic-iscsi"},
		{[]string{"upstreams", "nfs-zone1", "democraticCsi", "driverConfig", "nfs", "shareHost"}, "nas1.zone1.example.com"},
		{[]string{"upstreams", "local", "democraticCsi", "driverConfig", "local-hostpath", "shareBasePath"}, "/var/lib/csi-local-hostpath"},
		{[]string{"storageClasses"}, []any{}},
		{[]string{"volumeSnapshotClasses"}, []any{}},
	}
	for _, c := range checks {
		if d := cmp.Diff(c.want, at(v, c.path...)); d != "" {
			t.Errorf("%s (-want +got):\n%s", strings.Join(c.path, "."), d)
		}
	}
	for name := range at(v, "upstreams").(map[string]any) {
		if at(v, "upstreams", name, "democraticCsi", "driverConfig", "proxy") != nil {
			t.Errorf("upstreams.%s: the driver config still has its proxy: part", name)
		}
	}
	// Scalars are carried as written: democratic-csi reads 0777 and "0777"
	// differently from a re-encoded 511.
	for _, s := range []string{`datasetPermissionsMode: 0777`, `dirPermissionsMode: "0777"`, `sharenfs: "on"`} {
		if !strings.Contains(string(res.Values), s) {
			t.Errorf("the values lost %s as written:\n%s", s, res.Values)
		}
	}
	want := map[string]Served{
		"local":     {Upstream: "local", Driver: "local-hostpath", NodeLocal: true},
		"nfs-zone1": {Upstream: "nfs-zone1", Driver: "zfs-generic-nfs"},
		"iscsi":     {Upstream: "iscsi", Driver: "zfs-generic-iscsi"},
	}
	if d := cmp.Diff(want, res.Connections); d != "" {
		t.Errorf("connections (-want +got):\n%s", d)
	}
	notes := strings.Join(res.Notes, "\n")
	for _, s := range []string{"customRules: not carried", "connections iscsi, nfs-zone1 are not node-local", "type cluster: democratic-csi's local drivers need type node",
		"controller.externalProvisioner: not carried: the node-local mode has no controller Deployment",
		"csiDriver: attachRequired false, fsGroupPolicy ReadWriteOnceWithFSType, podInfoOnMount false, storageCapacity true are the chart's defaults"} {
		if !strings.Contains(notes, s) {
			t.Errorf("no note %q in:\n%s", s, notes)
		}
	}
}

// TestRefused: every driver that cannot run as an upstream is refused by
// name, and nothing is written.
func TestRefused(t *testing.T) {
	for _, d := range []string{"zfs-local-ephemeral-inline", "objectivefs", "node-manual", "no-such-driver"} {
		t.Run(d, func(t *testing.T) {
			in := exampleInput(t)
			in.Connections["bad"] = []byte("driver: " + d + "\n")
			res := Convert(in)
			if res.Values != nil {
				t.Error("values written for a refused connection")
			}
			if len(res.Errors) != 1 || !strings.Contains(res.Errors[0], "connection bad") || !strings.Contains(res.Errors[0], d) {
				t.Errorf("errors %q do not name connection bad and driver %s", res.Errors, d)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name   string
		values string
		conns  map[string]string
		csi    string
		want   string
	}{
		{"bare config without a name", "driver: proxy\nproxy: {configFolder: /mnt/connections/}\n", nil, "", "no csiDriver.name: give the CSI driver name"},
		{"names disagree", "csiDriver: {name: a.b}\ndriver: {config: {driver: proxy, proxy: {}}}\n", nil, "c.d", "--csi-name c.d differs from csiDriver.name a.b"},
		{"not the proxy", "csiDriver: {name: a.b}\ndriver: {config: {driver: zfs-generic-nfs}}\n", nil, "", `driver "zfs-generic-nfs": migrate converts democratic-csi's proxy driver`},
		{"config in a Secret", "csiDriver: {name: a.b}\ndriver: {existingConfigSecret: dcsi-config}\n", nil, "", "driver.existingConfigSecret: the proxy config is in Secret dcsi-config"},
		{"no driver", "csiDriver: {name: a.b}\n", nil, "", "neither democratic-csi's Helm values (driver.config) nor a proxy config"},
		{"not YAML", "csiDriver: [\n", nil, "", "values.yaml: not YAML"},
		{"topology without requirements", "", map[string]string{"n": "driver: nfs-client\nproxy: {perDriver: {topology: [{extra: {a/b: c}}]}}\n"}, "", "connection n: proxy.perDriver.topology[0]: requirements: missing"},
		{"local-hostpath without a path", "", map[string]string{"l": "driver: local-hostpath\n"}, "", "connection l: local-hostpath.shareBasePath: required"},
		{"connection not a mapping", "", map[string]string{"x": "- a\n"}, "", "connection x: a YAML mapping, not a list"},
		{"name proxy-topology cannot serve", "", map[string]string{"-bad": "driver: nfs-client\n"}, "", "connection -bad: connection name \"-bad\" has invalid character"},
		{"zone rule without a key", "csiDriver: {name: a.b}\ndriver: {config: {driver: proxy, proxy: {nodeTopology: {type: zone, fromRegexp: [{source: nodeName}]}}}}\n", nil, "", "fromRegexp[0].topologyKey: missing"},
		{"unknown type", "csiDriver: {name: a.b}\ndriver: {config: {driver: proxy, proxy: {nodeTopology: {type: region}}}}\n", nil, "", `proxy.nodeTopology.type "region"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{ValuesName: "values.yaml", Values: []byte(tc.values), CSIName: tc.csi, ConnectionsName: "connections/",
				Connections: map[string][]byte{"ok": []byte("driver: nfs-client\nnfs: {shareHost: h, shareBasePath: /b, controllerBasePath: /c}\n")}}
			if tc.values == "" {
				in.Values = []byte("csiDriver: {name: a.b}\ndriver: {config: {driver: proxy, proxy: {configFolder: /mnt/connections/}}}\n")
			}
			for k, v := range tc.conns {
				in.Connections[k] = []byte(v)
			}
			res := Convert(in)
			if res.Values != nil {
				t.Errorf("values written despite errors %v", res.Errors)
			}
			if !slices.ContainsFunc(res.Errors, func(e string) bool { return strings.Contains(e, tc.want) }) {
				t.Errorf("errors %q have none with %q", res.Errors, tc.want)
			}
		})
	}
}

// TestTopologyAndArgs: zone rules are carried, rules under cluster and
// node are dropped (democratic-csi ignores them there), the provisioner's
// topology flags become the chart's keys, and a connection name the chart
// cannot use as upstreams.<name> keeps its connection name.
func TestTopologyAndArgs(t *testing.T) {
	values := `
csiDriver: {name: org.example.proxy, attachRequired: false}
controller:
  extraVolumes:
  - {name: connections, secret: {secretName: connections}}
  - {name: region, hostPath: {path: /etc/region}}
  driver:
    extraVolumeMounts:
    - {name: connections, mountPath: /mnt/connections}
    extraEnv:
    - {name: REGION, value: r1}
    logLevel: debug
  externalProvisioner:
    extraArgs: [--feature-gates=Topology=true, --strict-topology=false, --immediate-topology, --timeout=90s]
  strategy: Recreate
storageClasses:
- {name: nfs, parameters: {connection: NFS.Zone1}, defaultClass: true}
- {name: gone, parameters: {connection: nowhere}}
driver:
  config:
    driver: proxy
    proxy:
      configFolder: /mnt/connections
      nodeTopology:
        type: %s
        prefix: example.com/topo
        fromRegexp:
        - {topologyKey: zone, source: nodeName, regex: 'node-(z\d)-.*', template: '{match:1}', matchRegexp: x}
`
	conns := map[string][]byte{"NFS.Zone1": []byte("driver: nfs-client\nnfs: {shareHost: h}\nproxy: {perDriver: {topology: [{requirements: {zone: z1}}]}}\n")}
	for _, typ := range []string{"zone", "cluster", "node"} {
		t.Run(typ, func(t *testing.T) {
			res := Convert(Input{ValuesName: "v.yaml", Values: []byte(strings.Replace(values, "%s", typ, 1)), ConnectionsName: "c", Connections: conns})
			if len(res.Errors) > 0 {
				t.Fatal(res.Errors)
			}
			v := decode(t, res.Values)
			rules := at(v, "config", "proxy", "nodeTopology", "fromRegexp")
			if typ == "zone" {
				want := []any{map[string]any{"topologyKey": "zone", "source": "nodeName", "regex": `node-(z\d)-.*`, "template": "{match:1}"}}
				if d := cmp.Diff(want, rules); d != "" {
					t.Errorf("rules (-want +got):\n%s", d)
				}
			} else if d := cmp.Diff([]any{}, rules); d != "" {
				t.Errorf("type %s: rules carried (an empty list must replace the chart's):\n%s", typ, d)
			}
			if p := at(v, "config", "proxy", "nodeTopology", "prefix"); p != "example.com/topo" {
				t.Errorf("prefix %v", p)
			}
			if d := cmp.Diff(map[string]any{"strictTopology": false, "immediateTopology": true, "extraArgs": []any{"--timeout=90s"}},
				at(v, "controller", "externalProvisioner")); d != "" {
				t.Errorf("externalProvisioner (-want +got):\n%s", d)
			}
			if d := cmp.Diff([]any{map[string]any{"name": "region", "hostPath": map[string]any{"path": "/etc/region"}}}, at(v, "controller", "extraVolumes")); d != "" {
				t.Errorf("extraVolumes (-want +got):\n%s", d)
			}
			if at(v, "controller", "driver", "extraVolumeMounts") != nil {
				t.Error("the connections mount is carried; the chart mounts its own")
			}
			if at(v, "csiDriver", "attachRequired") != false {
				t.Errorf("csiDriver.attachRequired not carried: %v", at(v, "csiDriver"))
			}
			up := res.Connections["NFS.Zone1"].Upstream
			if up != "nfs-zone1" {
				t.Errorf("upstream of NFS.Zone1: %q", up)
			}
			if d := cmp.Diff(map[string]any{"driver": "csi", "csi": map[string]any{"endpoint": "unix:///csi/upstreams/nfs-zone1/csi.sock"},
				"proxy": map[string]any{"perDriver": map[string]any{"topology": []any{map[string]any{"requirements": map[string]any{"zone": "z1"}}}}}},
				at(v, "connections", "NFS.Zone1")); d != "" {
				t.Errorf("connections.NFS.Zone1 (-want +got):\n%s", d)
			}
			if n := len(at(v, "storageClasses").([]any)); n != 2 {
				t.Errorf("%d storageClasses carried", n)
			}
			notes := strings.Join(res.Notes, "\n")
			for _, s := range []string{"controller.strategy Recreate: not carried", "controller.driver.logLevel: not carried", "fromRegexp[0].matchRegexp: not carried", "storageClasses[1] (gone): connection nowhere is not among"} {
				if typ == "zone" && !strings.Contains(notes, s) {
					t.Errorf("no note %q in:\n%s", s, notes)
				}
			}
			if typ != "zone" && !strings.Contains(notes, "1 rules not carried: democratic-csi ignores them under type "+typ) {
				t.Errorf("no note on the dropped rules:\n%s", notes)
			}
		})
	}
}

// TestStrategyNode: democratic-csi's controller.strategy node (its
// controller in the node DaemonSet) is the chart's node-local mode, even
// without a node-local connection.
func TestStrategyNode(t *testing.T) {
	res := Convert(Input{ValuesName: "v.yaml", ConnectionsName: "c",
		Values:      []byte("csiDriver: {name: a.b}\ncontroller: {strategy: node}\ndriver: {config: {driver: proxy, proxy: {configFolder: /mnt/connections}}}\n"),
		Connections: map[string][]byte{"nfs": []byte("driver: nfs-client\n")}})
	if len(res.Errors) > 0 {
		t.Fatal(res.Errors)
	}
	v := decode(t, res.Values)
	if at(v, "nodeLocal", "enabled") != true || at(v, "controller", "enabled") != false {
		t.Errorf("not the node-local mode: nodeLocal %v, controller %v", at(v, "nodeLocal"), at(v, "controller"))
	}
}

func TestParseSecret(t *testing.T) {
	b := []byte(`apiVersion: v1
kind: Secret
metadata: {name: connections}
data:
  nfs.yaml: ZHJpdmVyOiBuZnMtY2xpZW50Cg==
  README: eA==
stringData:
  local.yaml: "driver: local-hostpath\n"
`)
	files, skipped, err := ParseSecret("s.yaml", b)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string][]byte{"nfs": []byte("driver: nfs-client\n"), "local": []byte("driver: local-hostpath\n")}, files); d != "" {
		t.Errorf("files (-want +got):\n%s", d)
	}
	if len(skipped) != 1 || !strings.Contains(skipped[0], "data.README") {
		t.Errorf("skipped %q", skipped)
	}
	if _, _, err := ParseSecret("s.yaml", []byte("kind: ConfigMap\n")); err == nil || !strings.Contains(err.Error(), `kind "ConfigMap"`) {
		t.Errorf("a ConfigMap: %v", err)
	}
	if _, _, err := ParseSecret("s.yaml", []byte("kind: Secret\ndata: {a.yaml: '%%%'}\n")); err == nil || !strings.Contains(err.Error(), "data.a.yaml: not base64") {
		t.Errorf("bad base64: %v", err)
	}
}

func TestCheck(t *testing.T) {
	pvs := `{"kind": "List", "items": [
 {"kind": "PersistentVolume", "metadata": {"name": "pv-a"}, "spec": {"csi": {"driver": "d.x", "volumeHandle": "v:local/a"}}},
 {"kind": "PersistentVolume", "metadata": {"name": "pv-b"}, "spec": {"csi": {"driver": "d.x", "volumeHandle": "v:local/b"}}},
 {"kind": "PersistentVolume", "metadata": {"name": "pv-c"}, "spec": {"csi": {"driver": "d.x", "volumeHandle": "v:gone/c"}}},
 {"kind": "PersistentVolume", "metadata": {"name": "pv-d"}, "spec": {"csi": {"driver": "d.x", "volumeHandle": "plain-handle"}}},
 {"kind": "PersistentVolume", "metadata": {"name": "pv-e"}, "spec": {"csi": {"driver": "other.x", "volumeHandle": "v:gone/e"}}},
 {"kind": "PersistentVolume", "metadata": {"name": "pv-f"}, "spec": {"hostPath": {"path": "/x"}}},
 {"kind": "VolumeSnapshotContent", "metadata": {"name": "snap-1"}, "spec": {"driver": "d.x"}, "status": {"snapshotHandle": "s:local/s1"}}
]}`
	conns := map[string]Served{"local": {Upstream: "local", Driver: "local-hostpath", NodeLocal: true}}
	rep, err := Check("pvs.json", []byte(pvs), "d.x", conns)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, p := range rep.Prefixes {
		got[p.Prefix+map[bool]string{true: " served", false: " not served"}[p.Served != nil]] = p.Objects
	}
	want := map[string][]string{
		"v:local/ served":    {"PersistentVolume/pv-a", "PersistentVolume/pv-b"},
		"s:local/ served":    {"VolumeSnapshotContent/snap-1"},
		"v:gone/ not served": {"PersistentVolume/pv-c"},
		" not served":        {`PersistentVolume/pv-d ("plain-handle")`},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("prefixes (-want +got):\n%s", d)
	}
	if rep.Unserved() != 2 || rep.OtherDrivers != 2 {
		t.Errorf("unserved %d, other drivers %d", rep.Unserved(), rep.OtherDrivers)
	}
	lines := strings.Join(rep.Lines(), "\n")
	for _, s := range []string{"v:local/                 2 objects: served by connection local, upstreams.local (democratic-csi local-hostpath, node-local)", "v:gone/                  1 object NOT SERVED: no connection gone"} {
		if !strings.Contains(lines, s) {
			t.Errorf("no line %q in:\n%s", s, lines)
		}
	}
	if _, err := Check("x", []byte(`{"kind": "List", "items": [{"kind": "Pod"}]}`), "d.x", conns); err == nil || !strings.Contains(err.Error(), `items[0] is a "Pod"`) {
		t.Errorf("a Pod: %v", err)
	}
}

// TestChartKinds: the table of drivers is the chart's (dcsiKind in
// _upstreams.tpl), so migrate never writes a driver the chart refuses or
// refuses one it serves.
func TestChartKinds(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "helm", "proxy-topology", "templates", "_upstreams.tpl"))
	if err != nil {
		t.Fatal(err)
	}
	def := string(b)
	start := strings.Index(def, `define "proxy-topology.dcsiKind"`)
	end := strings.Index(def[start:], "{{- end -}}\n{{- end -}}")
	if start < 0 || end < 0 {
		t.Fatal("no dcsiKind in _upstreams.tpl")
	}
	got := map[string]kind{}
	line := regexp.MustCompile(`(?m)^\{\{- (?:else )?if (?:has \$d \(list ((?:"[^"]+" ?)+)\)|eq \$d "([^"]+)") -\}\}([a-z-]+)$`)
	for _, m := range line.FindAllStringSubmatch(def[start:start+end], -1) {
		for _, d := range regexp.MustCompile(`"([^"]+)"`).FindAllStringSubmatch(m[1]+`"`+m[2]+`"`, -1) {
			if d[1] != "" {
				got[d[1]] = kind(m[3])
			}
		}
	}
	if d := cmp.Diff(driverKinds, got); d != "" {
		t.Errorf("driverKinds differs from the chart's dcsiKind (-migrate +chart):\n%s", d)
	}
}
