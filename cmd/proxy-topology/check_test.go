package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestCheck runs `check` over the folders in testdata/check and compares
// the whole output: every line is a message an admin acts on.
func TestCheck(t *testing.T) {
	const own = "--csi-endpoint=unix:///run/csi/csi.sock"
	dir := func(name string) []string {
		// --upstream-timeout: the capability line and the loop check.
		return []string{"--config", "testdata/check/" + name + "/proxy.yaml", "--connections-folder", "testdata/check/" + name + "/connections", own, "--upstream-timeout=3s"}
	}
	for _, tc := range []struct {
		name       string
		args       []string
		code       int
		stdout     string
		stderrHas  string
		stdoutHas  string
		skipStdout bool
	}{
		{
			name: "good folder", args: dir("good"), code: 0,
			stdout: `testdata/check/good/proxy.yaml: ok
testdata/check/good/connections/iscsi-tcp.yaml: ok
testdata/check/good/connections/local.yaml: ok
testdata/check/good/connections/nfs.yaml: ok
advertised capabilities (auto, from 1 of 3 connections): controller service: yes; controller: CREATE_DELETE_VOLUME, CREATE_DELETE_SNAPSHOT, LIST_SNAPSHOTS, LIST_VOLUMES, CLONE_VOLUME, EXPAND_VOLUME, GET_CAPACITY, GET_VOLUME, GET_SNAPSHOT, GET_VOLUME_HEALTH, LIST_VOLUME_HEALTH, SINGLE_NODE_MULTI_WRITER; node: GET_VOLUME_STATS, EXPAND_VOLUME, GET_VOLUME_HEALTH, SINGLE_NODE_MULTI_WRITER; volume expansion: ONLINE; unconfirmed, so adding nothing: iscsi-tcp (Unavailable), nfs (Unavailable)
checked 4 files: 4 ok, 0 with warnings, 0 with errors
`,
		},
		{
			// Warnings, and one error: a connection to the proxy's own
			// socket is refused (SPEC §6), no longer only warned about.
			name: "warnings and the proxy's own socket", args: dir("warnings"), code: 1,
			stdout: `testdata/check/warnings/proxy.yaml: warning: unknown key cacheTimeout (ignored); proxy.defaultConnection "fast" has no file fast.yaml in testdata/check/warnings/connections
testdata/check/warnings/connections/iscsi.yaml: warning: proxy.perDriver.topology[0].extra: volumes are usable only on nodes labelled storage.example.com/iscsi=true; the proxy does not report it, so it must be set on the nodes by other means
testdata/check/warnings/connections/rack.yaml: warning: proxy.perDriver.topology[0].requirements["rack"]: no node reports org.democratic-csi.topology/rack (no fromRegexp rule has that key, nor does type cluster): only nodes labelled by other means can use the volumes
testdata/check/warnings/connections/self.yaml: error: csi.endpoint unix:///run/csi/csi.sock is the proxy's own socket: the proxy refuses the connection (calls would loop back into it)
testdata/check/warnings/connections/typo.yaml: warning: unknown key csi.timeuot (ignored)
testdata/check/warnings/connections/zonal.yaml: warning: proxy.perDriver.upstreamTopology["fake.example.com/rack"]: no node reports org.democratic-csi.topology/rack (no fromRegexp rule has that key, nor does type cluster): volumes the upstream places are usable only on nodes labelled by other means
testdata/check/warnings/connections/_private.yaml: warning: ignored by the proxy: connection name "_private" has invalid character '_' at byte 0 (allowed: letters, digits, and . _ - after the first)
testdata/check/warnings/connections/old.yml: warning: ignored by the proxy, which reads only <connection>.yaml; rename it to old.yaml
advertised capabilities (auto, from 1 of 5 connections): controller service: yes; controller: CREATE_DELETE_VOLUME, CREATE_DELETE_SNAPSHOT, LIST_SNAPSHOTS, LIST_VOLUMES, CLONE_VOLUME, EXPAND_VOLUME, GET_CAPACITY, GET_VOLUME, GET_SNAPSHOT, GET_VOLUME_HEALTH, LIST_VOLUME_HEALTH, SINGLE_NODE_MULTI_WRITER; node: GET_VOLUME_STATS, EXPAND_VOLUME, GET_VOLUME_HEALTH, SINGLE_NODE_MULTI_WRITER; volume expansion: ONLINE; unconfirmed, so adding nothing: iscsi (Unavailable), typo (Unavailable), zonal (Unavailable)
checked 8 files: 0 ok, 7 with warnings, 1 with errors
`,
		},
		{
			name: "broken connection files", args: dir("broken"), code: 1,
			stdout: `testdata/check/broken/proxy.yaml: ok
testdata/check/broken/connections/bad-endpoint.yaml: error: csi.endpoint: "http://nfs.example.com:2049": only unix:// and host:port endpoints are supported
testdata/check/broken/connections/bad-timeout.yaml: error: csi.timeout: line 4: want a duration with a unit, such as 30s or 2m; got a string ("soon")
testdata/check/broken/connections/bad-topology.yaml: error: local-hostpath.shareBasePath: must be an absolute path, got "relative/path"; proxy.perDriver.topology[0].requirements["zone"]: value "Zone 1!" is not a valid label value (a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')); proxy.perDriver.topology[0].extra["bad key"]: not a valid label key (name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')); proxy.perDriver.topology[1]: requirements and extra are both empty
testdata/check/broken/connections/bad-upstream.yaml: error: proxy.perDriver.upstreamTopology["bad key!"]: the upstream key is not a valid label key (name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')); proxy.perDriver.topology[0].extra["org.democratic-csi.topology/zone"]: the label is also the target of proxy.perDriver.upstreamTopology["fake.example.com/zone"], so the upstream's answer sets it; drop it from extra
testdata/check/broken/connections/bad-yaml.yaml: error: yaml: line 2: did not find expected ',' or ']'
testdata/check/broken/connections/empty.yaml: error: driver: required (csi, local-hostpath or group)
testdata/check/broken/connections/fine.yaml: ok
testdata/check/broken/connections/misspelt.yaml: error: csi.endpoint: required for driver: csi; warning: unknown key csi.endpiont (ignored)
testdata/check/broken/connections/nested-proxy.yaml: error: driver: proxy is only valid in the main config (a connection cannot be another proxy)
testdata/check/broken/connections/relative-socket.yaml: error: csi.endpoint: "unix://csi.sock": unix endpoint needs an absolute path (unix:///path/to/csi.sock); csi.nodeEndpoint: "nfs-node" is neither unix:///path nor host:port
testdata/check/broken/connections/typo-topology.yaml: error: proxy.perDriver.topolgy: unknown key under proxy: (a misspelt key there would silently change what the proxy does, so it is an error, not a warning)
testdata/check/broken/connections/unknown-driver.yaml: error: driver: "nfs" is not one of csi, local-hostpath, group
advertised capabilities (auto, from 0 of 1 connections): controller service: no; controller: none; node: none; volume expansion: none; unconfirmed, so adding nothing: fine (Unavailable)
checked 13 files: 2 ok, 0 with warnings, 11 with errors
`,
		},
		{
			name: "empty folder", args: dir("empty"), code: 0,
			stdout: `testdata/check/empty/proxy.yaml: ok
testdata/check/empty/connections: warning: no connection files: every call that names a connection will fail
advertised capabilities (auto, from 0 of 0 connections): controller service: no; controller: none; node: none; volume expansion: none
checked 2 files: 1 ok, 1 with warnings, 0 with errors
`,
		},
		{
			name: "missing folder", code: 1,
			args: []string{"--config", "testdata/check/good/proxy.yaml", "--connections-folder", "testdata/check/missing", own},
			stdout: `testdata/check/good/proxy.yaml: ok
testdata/check/missing: error: cannot read the connection folder: open: no such file or directory
checked 2 files: 1 ok, 0 with warnings, 1 with errors
`,
		},
		{
			// Without --connections-folder the config's own folder is
			// checked; it does not exist here.
			name: "configFolder from the main config", code: 1,
			args: []string{"--config", "testdata/check/good/proxy.yaml", own},
			stdout: `testdata/check/good/proxy.yaml: ok
/mnt/connections/: error: cannot read the connection folder: open: no such file or directory
checked 2 files: 1 ok, 0 with warnings, 1 with errors
`,
		},
		{
			name: "invalid main config stops there", code: 1,
			args: []string{"--config", "testdata/check/badmain/proxy.yaml", own},
			stdout: "testdata/check/badmain/proxy.yaml: error: proxy.cacheTimeoutMinutes: -5 is invalid (0: no cache, -1: forever, N>0: minutes); " +
				`proxy.nodeTopology.type: "galaxy" is not one of cluster, node, zone, custom; ` +
				"proxy.nodeTopology.fromRegexp[0].regex: error parsing regexp: missing closing ) in `(unclosed`\n" +
				"checked 1 file: 0 ok, 0 with warnings, 1 with errors\n",
		},
		{
			name: "missing main config", code: 1,
			args: []string{"--config", "testdata/check/nope.yaml"},
			stdout: `testdata/check/nope.yaml: error: open: no such file or directory
checked 1 file: 0 ok, 0 with warnings, 1 with errors
`,
		},
		{
			name: "standalone local-hostpath has no connections", code: 0,
			args: []string{"--config", "testdata/check/standalone/proxy.yaml"},
			stdout: `testdata/check/standalone/proxy.yaml: ok
checked 1 file: 1 ok, 0 with warnings, 0 with errors
`,
		},
		{
			name: "connections from a Secret are not read", code: 0,
			args: []string{"--config", "testdata/check/secret/proxy.yaml"},
			stdout: `testdata/check/secret/proxy.yaml: warning: connections come from secret storage/proxy-topology-connections, which check does not read; check the files before they go into it with --connections-folder DIR
checked 1 file: 0 ok, 1 with warnings, 0 with errors
`,
		},
		{
			name: "a Secret config with a folder to check", code: 0,
			args: []string{"--config", "testdata/check/secret/proxy.yaml", "--connections-folder", "testdata/check/good/connections", own, "--upstream-timeout=3s"},
			stdout: `testdata/check/secret/proxy.yaml: ok
testdata/check/good/connections/iscsi-tcp.yaml: ok
testdata/check/good/connections/local.yaml: ok
testdata/check/good/connections/nfs.yaml: ok
advertised capabilities (auto, from 1 of 3 connections): controller service: yes; controller: CREATE_DELETE_VOLUME, CREATE_DELETE_SNAPSHOT, LIST_SNAPSHOTS, LIST_VOLUMES, CLONE_VOLUME, EXPAND_VOLUME, GET_CAPACITY, GET_VOLUME, GET_SNAPSHOT, GET_VOLUME_HEALTH, LIST_VOLUME_HEALTH, SINGLE_NODE_MULTI_WRITER; node: GET_VOLUME_STATS, EXPAND_VOLUME, GET_VOLUME_HEALTH, SINGLE_NODE_MULTI_WRITER; volume expansion: ONLINE; unconfirmed, so adding nothing: iscsi-tcp (Unavailable), nfs (Unavailable)
checked 4 files: 4 ok, 0 with warnings, 0 with errors
`,
		},
		{
			// A long name leaves little room for upstream handles
			// (SPEC §5); with proxy.maxIdLength such IDs are refused.
			name: "connection name leaves little room", code: 0,
			args: []string{"--config", "testdata/check/idroom/proxy.yaml", "--connections-folder", "testdata/check/idroom/connections", own},
			stdout: `testdata/check/idroom/proxy.yaml: ok
testdata/check/idroom/connections/nas.yaml: ok
testdata/check/idroom/connections/nas-with-a-rather-long-descriptive-name.yaml: warning: the connection name is 39 bytes, which leaves 86 bytes for upstream handles within 128: IDs of longer handles (democratic-csi's snapshot handles are 123 bytes) are refused (proxy.maxIdLength: 128): CreateVolume and CreateSnapshot fail and delete what the upstream made; a shorter name leaves more room
checked 3 files: 2 ok, 1 with warnings, 0 with errors
`,
		},
		{
			// Without proxy.maxIdLength (the default) such IDs are
			// returned, and the warning says so.
			name: "connection name leaves little room, maxIdLength unset", code: 0,
			args: []string{"--config", "testdata/check/idroom/proxy-default.yaml", "--connections-folder", "testdata/check/idroom/connections", own},
			stdout: `testdata/check/idroom/proxy-default.yaml: ok
testdata/check/idroom/connections/nas.yaml: ok
testdata/check/idroom/connections/nas-with-a-rather-long-descriptive-name.yaml: warning: the connection name is 39 bytes, which leaves 86 bytes for upstream handles within 128: IDs of longer handles (democratic-csi's snapshot handles are 123 bytes) are returned anyway (proxy.maxIdLength is unset), warned about and counted in proxy_topology_long_ids_total; a shorter name leaves more room
checked 3 files: 2 ok, 1 with warnings, 0 with errors
`,
		},
		{name: "no config", args: nil, code: 2, stderrHas: "proxy-topology check: --config is required\n"},
		{name: "stray argument", args: []string{"--config", "x.yaml", "extra"}, code: 2, stderrHas: "unexpected argument \"extra\""},
		{name: "bad flag", args: []string{"--nope"}, code: 2, stderrHas: "proxy-topology check: unknown flag: --nope\n\nUsage:\n  proxy-topology check --config PATH"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("PROXY_TOPOLOGY_CONFIG", "")
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"check"}, tc.args...), &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout.String(), stderr.String())
			}
			if tc.stderrHas == "" && stdout.String() != tc.stdout {
				t.Errorf("stdout:\n%s\nwant:\n%s", stdout.String(), tc.stdout)
			}
			if !strings.Contains(stderr.String(), tc.stderrHas) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), tc.stderrHas)
			}
		})
	}
}

// TestCheckExamples keeps the shipped examples valid: the only findings
// allowed are the warnings the examples exist to show.
func TestCheckExamples(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"check", "--config", "../../examples/proxy.yaml", "--connections-folder", "../../examples/connections",
		"--csi-endpoint=unix:///run/csi/csi.sock"}, &stdout, &stderr)
	want := `../../examples/proxy.yaml: ok
../../examples/connections/democratic-csi-local.yaml: warning: node-local: proxy.perDriver.upstreamTopology maps the upstream's answer to org.democratic-csi.topology/node, so each volume stays on the node whose controller (and upstream) creates it and is pinned there; without the node-local deployment mode (proxy.nodeLocal: true, a controller and a --node-deployment provisioner on every node; docs/kubernetes.md) every volume lands on the one controller's node. If the upstream's storage is reachable from more than its node, map its keys to others, or declare where it is reachable in proxy.perDriver.topology
../../examples/connections/iscsi-multizone.yaml: warning: proxy.perDriver.topology[0].extra: volumes are usable only on nodes labelled storage.example.com/iscsi=true; the proxy does not report it, so it must be set on the nodes by other means
../../examples/connections/local.yaml: warning: node-local: a local-hostpath connection without proxy.perDriver.topology keeps each volume on the disk of the node whose controller creates it, and pins the volume there by org.democratic-csi.topology/node; without the node-local deployment mode (proxy.nodeLocal: true, a controller and a --node-deployment provisioner on every node; docs/kubernetes.md) every volume lands on the one controller's node. If /var/lib/proxy-topology/local is shared storage, declare where it is reachable in proxy.perDriver.topology
../../examples/connections/local-zone1.yaml: ok
../../examples/connections/nfs-cluster.yaml: ok
../../examples/connections/nfs-zone1.yaml: ok
../../examples/connections/nfs-zone2.yaml: ok
../../examples/connections/nfs-zone3.yaml: ok
../../examples/connections/nfs-zones.yaml: ok
../../examples/connections/zonal-disk.yaml: ok
checked 11 files: 8 ok, 3 with warnings, 0 with errors
`
	if code != 0 || stdout.String() != want {
		t.Errorf("exit %d\n%s%s\nwant:\n%s", code, stdout.String(), stderr.String(), want)
	}
}

func TestFlatten(t *testing.T) {
	for _, tc := range []struct{ msg, prefix, want string }{
		{"file a.yaml: x\nfile a.yaml: y", "file a.yaml: ", "x|y"},
		{"file a.yaml: yaml: unmarshal errors:\n  line 4: bad\n  line 5: worse", "file a.yaml: ", "yaml: unmarshal errors: line 4: bad|line 5: worse"},
		{"\n\nplain\n", "file a.yaml: ", "plain"},
	} {
		if got := strings.Join(flatten(tc.msg, tc.prefix), "|"); got != tc.want {
			t.Errorf("flatten(%q) = %q, want %q", tc.msg, got, tc.want)
		}
	}
}
