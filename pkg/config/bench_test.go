package config

import (
	"testing"

	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/nodetopology"
)

// benchConnection is a connection file with every section: the controller
// parses thousands of these at start.
const benchConnection = `driver: csi
csi:
  endpoint: unix:///csi/upstreams/iscsi/csi.sock
  nodeEndpoint: unix:///csi/upstreams/iscsi/node.sock
  timeout: 30s
  parameters:
    csi.storage.k8s.io/fstype: xfs
    example.com/replicas: 3
  secrets:
    csi.storage.k8s.io/provisioner-secret-name: creds
proxy:
  perDriver:
    nodeId:
      template: "iqn.2000-01.com.example:{nodeName}"
    topology:
    - requirements:
        zone: zone1
      extra:
        example.com/rack: r1
    - requirements:
        zone: zone2
`

func BenchmarkParseConnectionFile(b *testing.B) {
	data := []byte(benchConnection)
	opts := accessible.Options{Prefix: nodetopology.DefaultPrefix, Type: nodetopology.TypeZone}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseFile("bench.yaml", data, opts); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLoadMain(b *testing.B) {
	data := []byte(minimal + "  cacheTimeoutMinutes: 5\n  nodeTopology:\n    type: zone\n    fromRegexp:\n    - topologyKey: zone\n      source: nodeName\n      regex: \"(z[0-9])\"\n      template: \"{match:1}\"\n")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := LoadMain("bench.yaml", data, nil); err != nil {
			b.Fatal(err)
		}
	}
}
