package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestTopologyUpstreamAnswer (SPEC §13): the dry run shows the
// requirements a mapped upstream gets, and what an upstream answer given
// with --upstream-answer becomes: translated into the proxy's keys, or
// refused as the server refuses it (an unmapped key, an answer the
// requisite does not admit, a node-local upstream naming another node).
func TestTopologyUpstreamAnswer(t *testing.T) {
	dir := t.TempDir()
	cfg := writeDryRunConfig(t, dir)
	for name, content := range map[string]string{
		"zonal": "driver: csi\ncsi:\n  endpoint: unix:///csi/zonal.sock\nproxy:\n  perDriver:\n    upstreamTopology: {fake.example.com/zone: zone}\n",
		"local": "driver: csi\ncsi:\n  endpoint: unix:///csi/local.sock\nproxy:\n  perDriver:\n    upstreamTopology: {org.democratic-csi.topology/node: node}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, "connections", name+".yaml"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	checkDryRuns(t, cfg, "zonal", []dryRunCase{
		{name: "translated both ways", args: []string{"--requisite", "zone=zone2", "--upstream-answer", "fake.example.com/zone=zone2"}, code: 0, want: []string{
			"requirements sent upstream (proxy.perDriver.upstreamTopology): requisite [{fake.example.com/zone=zone2}]",
			"upstream answers: [{fake.example.com/zone=zone2}]", "CreateVolume: OK",
			"accessible_topology: [{org.democratic-csi.topology/zone=zone2}]"}},
		{name: "outside the requisite", args: []string{"--requisite", "zone=zone1", "--upstream-answer", "fake.example.com/zone=zone2"}, code: 1, want: []string{
			"CreateVolume: FailedPrecondition", "no term of the request's requisite", "the server deletes the upstream volume"}},
		{name: "an unmapped key", args: []string{"--upstream-answer", "fake.example.com/zone=zone2,fake.example.com/rack=r1"}, code: 1, want: []string{
			"CreateVolume: FailedPrecondition", `key "fake.example.com/rack"`, "proxy.perDriver.upstreamTopology does not map"}},
		{name: "a bad term", args: []string{"--upstream-answer", "novalue"}, code: 2},
	})
	checkDryRuns(t, cfg, "local", []dryRunCase{
		{name: "this node", args: []string{"--upstream-answer", "org.democratic-csi.topology/node=node-1"}, code: 0, want: []string{
			`node-local (no topology list, volumes stay on one node): decided as the controller on node "node-1"`,
			"accessible_topology: [{org.democratic-csi.topology/node=node-1}]"}},
		{name: "the upstream names another node", args: []string{"--upstream-answer", "org.democratic-csi.topology/node=node-9"}, code: 1, want: []string{
			"CreateVolume: FailedPrecondition", `puts the volume on node "node-9"`}},
	})
}
