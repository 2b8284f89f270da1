package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/nodetopology"
)

// connFile is the name every in-memory connection file is parsed as.
const connFile = "/mnt/connections/test.yaml"

var topoOpts = accessible.Options{Prefix: nodetopology.DefaultPrefix, Type: nodetopology.TypeCluster}

func parseConn(yml string) (*Connection, []string, error) {
	return ParseConnection(connFile, []byte(yml), topoOpts)
}

// connErrors checks that err names connFile and splits it into one string
// per problem.
func connErrors(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	msg, ok := strings.CutPrefix(err.Error(), "file "+connFile+": ")
	if !ok {
		t.Fatalf("error %q does not start with %q", err, "file "+connFile+": ")
	}
	return strings.Split(msg, "\n")
}

// Every example connection is documentation and part of the built-in
// default, so each must parse exactly as written.
func TestExampleConnections(t *testing.T) {
	files, err := filepath.Glob("../../examples/connections/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no example connections found")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if IsGroupFile(data) {
				if _, err := ParseGroup(f, data); err != nil {
					t.Fatal(err)
				}
				return
			}
			// Under every node topology type: an example must not depend
			// on one.
			for _, typ := range []string{nodetopology.TypeCluster, nodetopology.TypeNode, nodetopology.TypeZone} {
				c, warnings, err := ParseConnection(f, data, accessible.Options{Prefix: nodetopology.DefaultPrefix, Type: typ})
				if err != nil {
					t.Fatalf("type %s: %v", typ, err)
				}
				if len(warnings) != 0 {
					t.Errorf("type %s: warnings %q, want none", typ, warnings)
				}
				if c.Driver != DriverCSI && c.Driver != DriverLocalHostpath {
					t.Errorf("driver %q", c.Driver)
				}
			}
		})
	}
}

func TestParseConnection(t *testing.T) {
	tests := []struct {
		name string
		yml  string
		want Connection
	}{
		{
			name: "csi, minimal",
			yml:  "driver: csi\ncsi:\n  endpoint: unix:///csi/nfs.sock\n",
			want: Connection{Driver: DriverCSI, CSI: CSIUpstream{Endpoint: "unix:///csi/nfs.sock"}},
		},
		{
			name: "timeout as a duration",
			yml:  "driver: csi\ncsi:\n  endpoint: unix:///csi/nfs.sock\n  timeout: 30s\n",
			want: Connection{Driver: DriverCSI, CSI: CSIUpstream{Endpoint: "unix:///csi/nfs.sock", Timeout: 30 * time.Second}},
		},
		{
			name: "timeout compound duration",
			yml:  "driver: csi\ncsi:\n  endpoint: unix:///csi/nfs.sock\n  timeout: 1m30s\n",
			want: Connection{Driver: DriverCSI, CSI: CSIUpstream{Endpoint: "unix:///csi/nfs.sock", Timeout: 90 * time.Second}},
		},
		{
			name: "timeout 0s",
			yml:  "driver: csi\ncsi:\n  endpoint: unix:///csi/nfs.sock\n  timeout: 0s\n",
			want: Connection{Driver: DriverCSI, CSI: CSIUpstream{Endpoint: "unix:///csi/nfs.sock"}},
		},
		{
			name: "separate node endpoint",
			yml:  "driver: csi\ncsi:\n  endpoint: unix:///csi/controller.sock\n  nodeEndpoint: unix:///csi/node.sock\n",
			want: Connection{Driver: DriverCSI, CSI: CSIUpstream{Endpoint: "unix:///csi/controller.sock", NodeEndpoint: "unix:///csi/node.sock"}},
		},
		{
			name: "dotted and slashed parameter keys survive, scalars become strings",
			yml: `driver: csi
csi:
  endpoint: nfs.example.com:9000
  parameters:
    csi.storage.k8s.io/fstype: xfs
    example.com/replicas: 3
    thin: true
  secrets:
    csi.storage.k8s.io/provisioner-secret-name: creds
`,
			want: Connection{Driver: DriverCSI, CSI: CSIUpstream{
				Endpoint: "nfs.example.com:9000",
				Parameters: map[string]string{
					"csi.storage.k8s.io/fstype": "xfs",
					"example.com/replicas":      "3",
					"thin":                      "true",
				},
				Secrets: map[string]string{"csi.storage.k8s.io/provisioner-secret-name": "creds"},
			}},
		},
		{
			name: "local-hostpath",
			yml:  "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: /var/lib/x\n  stage: true\n  controllerPublish: true\n",
			want: Connection{Driver: DriverLocalHostpath, LocalHostpath: LocalHostpath{ShareBasePath: "/var/lib/x", Stage: true, ControllerPublish: true}},
		},
		{
			name: "topology and node id template",
			yml: `driver: local-hostpath
local-hostpath:
  shareBasePath: /x
proxy:
  perDriver:
    nodeId:
      template: "iqn.2000-01.com.example:{nodeName}"
    topology:
    - requirements:
        zone: zone1
        topology.kubernetes.io/region: r1
      extra:
        custom.prefix/custom.name: custom.value
    - extra:
        example.com/only-extra: "true"
`,
			want: Connection{
				Driver:        DriverLocalHostpath,
				LocalHostpath: LocalHostpath{ShareBasePath: "/x"},
				Proxy: ConnectionPlus{PerDriver: PerDriver{
					NodeID: NodeIDTemplate{Template: "iqn.2000-01.com.example:{nodeName}"},
					Topology: []accessible.Entry{
						{
							Requirements: map[string]string{"zone": "zone1", "topology.kubernetes.io/region": "r1"},
							Extra:        map[string]string{"custom.prefix/custom.name": "custom.value"},
						},
						{Extra: map[string]string{"example.com/only-extra": "true"}},
					},
				}},
			},
		},
		{
			name: "trailing document marker and comments",
			yml:  "# head\ndriver: csi\ncsi:\n  endpoint: unix:///s\n---\n# nothing else\n",
			want: Connection{Driver: DriverCSI, CSI: CSIUpstream{Endpoint: "unix:///s"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, warnings, err := parseConn(tt.yml)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(&tt.want, c, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Connection (-want +got):\n%s", diff)
			}
			if len(warnings) != 0 {
				t.Errorf("warnings %q, want none", warnings)
			}
		})
	}
}

func TestNodeSideEndpoint(t *testing.T) {
	tests := []struct{ endpoint, node, want string }{
		{"unix:///c.sock", "", "unix:///c.sock"},
		{"unix:///c.sock", "unix:///n.sock", "unix:///n.sock"},
		{"host:1", "host:2", "host:2"},
	}
	for _, tt := range tests {
		u := CSIUpstream{Endpoint: tt.endpoint, NodeEndpoint: tt.node}
		if got := u.NodeSideEndpoint(); got != tt.want {
			t.Errorf("NodeSideEndpoint(%q, %q) = %q, want %q", tt.endpoint, tt.node, got, tt.want)
		}
	}
	// Parsed from a file, an empty nodeEndpoint defaults to endpoint.
	c, _, err := parseConn("driver: csi\ncsi:\n  endpoint: unix:///c.sock\n  nodeEndpoint: \"\"\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.CSI.NodeSideEndpoint(); got != "unix:///c.sock" {
		t.Errorf("NodeSideEndpoint = %q, want unix:///c.sock", got)
	}
}

func TestParseConnectionErrors(t *testing.T) {
	csi := func(extra string) string { return "driver: csi\ncsi:\n  endpoint: unix:///csi.sock\n" + extra }
	tests := []struct {
		name string
		yml  string
		want []string
	}{
		{
			name: "empty file",
			yml:  "",
			want: []string{"driver: required (csi, local-hostpath or group)"},
		},
		{
			name: "only comments",
			yml:  "# driver: csi\n",
			want: []string{"driver: required (csi, local-hostpath or group)"},
		},
		{
			name: "driver missing",
			yml:  "csi:\n  endpoint: unix:///csi.sock\n",
			want: []string{"driver: required (csi, local-hostpath or group)"},
		},
		{
			name: "driver proxy: no proxy on proxy",
			yml:  "driver: proxy\n",
			want: []string{"driver: proxy is only valid in the main config (a connection cannot be another proxy)"},
		},
		{
			name: "unknown driver",
			yml:  "driver: nfs\n",
			want: []string{`driver: "nfs" is not one of csi, local-hostpath, group`},
		},
		{
			name: "csi without endpoint",
			yml:  "driver: csi\n",
			want: []string{"csi.endpoint: required for driver: csi"},
		},
		{
			name: "bad node endpoint",
			yml:  csi("  nodeEndpoint: unix://node.sock\n"),
			want: []string{`csi.nodeEndpoint: "unix://node.sock": unix endpoint needs an absolute path (unix:///path/to/csi.sock)`},
		},
		{
			name: "negative timeout",
			yml:  csi("  timeout: -5s\n"),
			want: []string{"csi.timeout: -5s is negative"},
		},
		{
			name: "connection parameter is reserved",
			yml:  csi("  parameters:\n    connection: other\n"),
			want: []string{"csi.parameters.connection: is reserved for the proxy and never sent upstream"},
		},
		{
			name: "local-hostpath without base path",
			yml:  "driver: local-hostpath\n",
			want: []string{`local-hostpath.shareBasePath: must be an absolute path, got ""`},
		},
		{
			name: "local-hostpath relative base path",
			yml:  "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: data\n",
			want: []string{`local-hostpath.shareBasePath: must be an absolute path, got "data"`},
		},
		{
			name: "node id template with another placeholder",
			yml:  csi("proxy:\n  perDriver:\n    nodeId:\n      template: \"{nodeName}-{zone}\"\n"),
			want: []string{`proxy.perDriver.nodeId.template: "{nodeName}-{zone}": only the {nodeName} placeholder is supported`},
		},
		{
			name: "every problem at once",
			yml: `driver: csi
csi:
  endpoint: http://x
  nodeEndpoint: foo
  timeout: -1s
  parameters:
    connection: x
proxy:
  perDriver:
    topology:
    - {}
`,
			want: []string{
				`csi.endpoint: "http://x": only unix:// and host:port endpoints are supported`,
				`csi.nodeEndpoint: "foo" is neither unix:///path nor host:port`,
				"csi.timeout: -1s is negative",
				"csi.parameters.connection: is reserved for the proxy and never sent upstream",
				"proxy.perDriver.topology[0]: requirements and extra are both empty",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, err := parseConn(tt.yml)
			if c != nil {
				t.Errorf("Connection = %+v, want nil with an error", c)
			}
			if diff := cmp.Diff(tt.want, connErrors(t, err)); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

// Topology problems are found by package accessible (and tested there);
// here only that they surface, each with its full path, next to the
// connection's own errors.
func TestParseConnectionTopologyErrors(t *testing.T) {
	_, _, err := parseConn(`driver: csi
csi:
  endpoint: unix:///csi.sock
  timeout: -1s
proxy:
  perDriver:
    topology:
    - requirements:
        zone: zone1
    - requirements:
        "bad key!": x
    - extra:
        zone: "not/a value"
    - {}
`)
	lines := connErrors(t, err)
	wantPrefixes := []string{
		"csi.timeout: ",
		`proxy.perDriver.topology[1].requirements["bad key!"]: `,
		`proxy.perDriver.topology[2].extra["zone"]: `,
		"proxy.perDriver.topology[3]: ",
	}
	if len(lines) != len(wantPrefixes) {
		t.Fatalf("errors:\n%s\nwant %d, starting with %q", strings.Join(lines, "\n"), len(wantPrefixes), wantPrefixes)
	}
	for i, p := range wantPrefixes {
		if !strings.HasPrefix(lines[i], p) {
			t.Errorf("error %d = %q, want it to start with %q", i, lines[i], p)
		}
	}
}

func TestParseConnectionYAMLErrors(t *testing.T) {
	tests := []struct{ name, yml, want string }{
		{"syntax", "driver: [csi\n", "yaml: line 1: did not find expected ',' or ']'"},
		{"list document", "- driver: csi\n", "the file: line 1: want a mapping with the keys driver, csi, local-hostpath, proxy; got a list"},
		{"scalar document", "csi\n", "the file: line 1: want a mapping with the keys driver, csi, local-hostpath, proxy; got a string (\"csi\")"},
		{"duplicate key", "driver: csi\ndriver: proxy\n", "yaml: unmarshal errors:\n  line 2: mapping key \"driver\" already defined at line 1"},
		// A bare number is ambiguous (seconds? nanoseconds?); the message
		// points at the line.
		{"timeout without a unit", "driver: csi\ncsi:\n  endpoint: unix:///s\n  timeout: 30\n", "csi.timeout: line 4: want a duration with a unit, such as 30s or 2m; got a number (\"30\")"},
		{"timeout that is not a duration", "driver: csi\ncsi:\n  endpoint: unix:///s\n  timeout: soon\n", "csi.timeout: line 4: want a duration with a unit, such as 30s or 2m; got a string (\"soon\")"},
		{"parameters as a list", "driver: csi\ncsi:\n  endpoint: unix:///s\n  parameters: [a]\n", "csi.parameters: line 4: want a mapping of names to strings; got a list"},
		{"topology as a string", "driver: csi\ncsi:\n  endpoint: unix:///s\nproxy:\n  perDriver:\n    topology: zone1\n", "proxy.perDriver.topology: line 6: want a list, each item a mapping with the keys requirements, extra; got a string (\"zone1\")"},
		{"requirements as a list", "driver: csi\ncsi:\n  endpoint: unix:///s\nproxy:\n  perDriver:\n    topology:\n    - requirements: [zone1]\n", "proxy.perDriver.topology[0].requirements: line 7: want a mapping of names to strings; got a list"},
		{"every type error at once", "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: /x\n  stage: maybe\n  controllerPublish: [yes]\n", "local-hostpath.stage: line 4: want true or false; got a string (\"maybe\")\nlocal-hostpath.controllerPublish: line 5: want true or false; got a list"},
		{"second document", "driver: csi\ncsi:\n  endpoint: unix:///s\n---\ndriver: proxy\n", "line 4: a second YAML document; a connection file holds exactly one"},
		{"broken second document", "driver: csi\ncsi:\n  endpoint: unix:///s\n---\ndriver: [\n", "yaml: line 5: did not find expected node content"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, err := parseConn(tt.yml)
			if c != nil {
				t.Errorf("Connection = %+v, want nil", c)
			}
			if want := "file " + connFile + ": " + tt.want; err == nil || err.Error() != want {
				t.Errorf("error:\n%v\nwant:\n%s", err, want)
			}
		})
	}
}

func TestParseConnectionUnknownKeys(t *testing.T) {
	warn := func(key string) string { return "file " + connFile + ": unknown key " + key + " (ignored)" }
	tests := []struct {
		name string
		yml  string
		want []string
	}{
		{
			name: "top level",
			yml:  "driver: csi\ndrivr: csi\ncsi:\n  endpoint: unix:///s\n",
			want: []string{warn("drivr")},
		},
		{
			name: "in csi, wrong case",
			yml:  "driver: csi\ncsi:\n  endpoint: unix:///s\n  nodeendpoint: unix:///n\n",
			want: []string{warn("csi.nodeendpoint")},
		},
		{
			name: "non-string key",
			yml:  "driver: csi\ncsi:\n  endpoint: unix:///s\n  1: x\n",
			want: []string{warn("csi.1")},
		},
		{
			name: "in local-hostpath",
			yml:  "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: /x\n  basePath: /y\n",
			want: []string{warn("local-hostpath.basePath")},
		},
		{
			name: "free-form maps are not checked",
			yml:  "driver: csi\ncsi:\n  endpoint: unix:///s\n  parameters: {anything.at/all: x}\n  secrets: {whatever: y}\nproxy:\n  perDriver:\n    topology:\n    - requirements: {any-key: v}\n      extra: {a.b/c: d}\n",
		},
		{
			name: "sections of the other driver are known",
			yml:  "driver: csi\ncsi:\n  endpoint: unix:///s\nlocal-hostpath:\n  shareBasePath: /x\n",
		},
		{
			// The keys are checked as decoding sees them: an anchor's
			// keys where it is used, a merged mapping's keys beside the
			// mapping's own.
			name: "through an alias and a merge key",
			yml:  "driver: csi\ncommon: &c {endpoint: unix:///s, tiemout: 1s}\ncsi:\n  <<: *c\n  nodeEndpoint: unix:///n\n  prameters: {}\nlocal-hostpath: *c\n",
			want: []string{warn("common"), warn("csi.prameters"), warn("csi.tiemout"), warn("local-hostpath.endpoint"), warn("local-hostpath.tiemout")},
		},
		{
			name: "null and empty sections",
			yml:  "driver: csi\ncsi:\n  endpoint: unix:///s\nlocal-hostpath:\nproxy: {}\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, warnings, err := parseConn(tt.yml)
			if err != nil {
				t.Fatalf("unknown keys must not be fatal: %v", err)
			}
			if diff := cmp.Diff(tt.want, warnings, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
	// Warnings come with a validation error too, so the admin sees that
	// the typo is what broke the file.
	_, warnings, err := parseConn("drivr: csi\n")
	if err == nil || len(warnings) != 1 || warnings[0] != warn("drivr") {
		t.Errorf("got warnings %q, error %v; want the drivr warning and an error", warnings, err)
	}
}

// TestParseConnectionUnknownProxyKeys: an unknown key under proxy: fails
// the file (so the connection fails, not just warns) with the key path;
// warnings about keys elsewhere still come with it.
func TestParseConnectionUnknownProxyKeys(t *testing.T) {
	why := ": unknown key under proxy: (a misspelt key there would silently change what the proxy does, so it is an error, not a warning)"
	tests := []struct {
		name      string
		yml       string
		want      []string
		wantWarns []string
	}{
		{"in proxy and perDriver", "driver: csi\ncsi:\n  endpoint: unix:///s\nproxy:\n  topology: []\n  perDriver:\n    toplogy: []\n",
			[]string{"proxy.perDriver.toplogy", "proxy.topology"}, nil},
		{"inside a topology entry", "driver: csi\ncsi:\n  endpoint: unix:///s\nproxy:\n  perDriver:\n    topology:\n    - requirements: {zone: z1}\n    - requirements: {zone: z2}\n      extras: {a.b/c: d}\n",
			[]string{"proxy.perDriver.topology[1].extras"}, nil},
		{"inside nodeId", "driver: csi\ncsi:\n  endpoint: unix:///s\nproxy:\n  perDriver:\n    nodeId:\n      templat: x\n",
			[]string{"proxy.perDriver.nodeId.templat"}, nil},
		{"with a warning elsewhere", "driver: csi\ncsi:\n  endpoint: unix:///s\n  timeuot: 1s\nproxy:\n  perdriver: {}\n",
			[]string{"proxy.perdriver"}, []string{"file " + connFile + ": unknown key csi.timeuot (ignored)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, warnings, err := parseConn(tt.yml)
			if c != nil {
				t.Errorf("Connection = %+v, want nil", c)
			}
			var lines []string
			for _, k := range tt.want {
				lines = append(lines, k+why)
			}
			if want := "file " + connFile + ": " + strings.Join(lines, "\n"); err == nil || err.Error() != want {
				t.Errorf("error:\n%v\nwant:\n%s", err, want)
			}
			if diff := cmp.Diff(tt.wantWarns, warnings, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNodeIDTemplate(t *testing.T) {
	tests := []struct {
		template, node, rendered string
	}{
		{"", "node-1", "node-1"},
		{"{nodeName}", "node-1", "node-1"},
		{"iqn.2000-01.com.example:{nodeName}", "node-1", "iqn.2000-01.com.example:node-1"},
		{"{nodeName}.example.com", "n", "n.example.com"},
		{"pre-{nodeName}-post", "", "pre--post"},
	}
	for _, tt := range tests {
		tpl := NodeIDTemplate{Template: tt.template}
		got := tpl.Render(tt.node)
		if got != tt.rendered {
			t.Errorf("%q.Render(%q) = %q, want %q", tt.template, tt.node, got, tt.rendered)
		}
		back, ok := tpl.Parse(got)
		if !ok || back != tt.node {
			t.Errorf("%q.Parse(%q) = %q, %t; want %q, true", tt.template, got, back, ok, tt.node)
		}
	}
	refused := []struct{ template, id string }{
		{"iqn:{nodeName}", "other:node-1"},
		{"{nodeName}.example.com", "node-1.example.org"},
		{"a{nodeName}a", "a"},          // before and after would overlap
		{"fixed", "fixed"},             // no placeholder: cannot be inverted
		{"{nodeName}{nodeName}", "aa"}, // ambiguous
	}
	for _, tt := range refused {
		if got, ok := (NodeIDTemplate{Template: tt.template}).Parse(tt.id); ok {
			t.Errorf("%q.Parse(%q) = %q, true; want false", tt.template, tt.id, got)
		}
	}
}

// TestParseConnectionUpstreamTopology (SPEC §13): proxy.perDriver.
// upstreamTopology is read as written and checked with the topology list;
// every problem names its key, and the built-in driver cannot have one.
func TestParseConnectionUpstreamTopology(t *testing.T) {
	c, warnings, err := parseConn(`driver: csi
csi: {endpoint: unix:///csi/upstreams/local/csi.sock}
proxy:
  perDriver:
    upstreamTopology:
      org.democratic-csi.topology/node: node
`)
	if err != nil || len(warnings) > 0 {
		t.Fatalf("err %v, warnings %q", err, warnings)
	}
	if d := cmp.Diff(map[string]string{"org.democratic-csi.topology/node": "node"}, c.Proxy.PerDriver.UpstreamTopology); d != "" {
		t.Errorf("upstreamTopology (-want +got):\n%s", d)
	}
	if !c.Topology().NodeLocal(topoOpts) {
		t.Error("a connection mapping to the node key is not node-local")
	}

	_, _, err = parseConn(`driver: csi
csi: {endpoint: unix:///csi.sock}
proxy:
  perDriver:
    topology:
    - requirements: {fake.example.com/zone: z1}
      extra: {org.democratic-csi.topology/zone: z1}
    upstreamTopology:
      fake.example.com/zone: zone
      "bad key!": rack
`)
	lines := connErrors(t, err)
	want := []string{
		`proxy.perDriver.upstreamTopology["bad key!"]: the upstream key is not a valid label key`,
		`proxy.perDriver.topology[0].extra["org.democratic-csi.topology/zone"]: the label is also the target of proxy.perDriver.upstreamTopology["fake.example.com/zone"]`,
		`proxy.perDriver.topology[0].requirements["fake.example.com/zone"]: "fake.example.com/zone" is the upstream's key`,
	}
	if len(lines) != len(want) {
		t.Fatalf("errors:\n%s\nwant %d", strings.Join(lines, "\n"), len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("error %d = %q, want it to start with %q", i, lines[i], w)
		}
	}

	_, _, err = parseConn(`driver: local-hostpath
local-hostpath: {shareBasePath: /data}
proxy: {perDriver: {upstreamTopology: {a.example.com/node: node}}}
`)
	if lines := connErrors(t, err); len(lines) != 1 || !strings.HasPrefix(lines[0], "proxy.perDriver.upstreamTopology: is only for driver: csi") {
		t.Errorf("errors %q", lines)
	}
}
