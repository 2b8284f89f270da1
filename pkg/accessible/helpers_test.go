package accessible

import (
	"fmt"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
)

const testPrefix = "org.democratic-csi.topology"

var (
	zoneOpts    = Options{Prefix: testPrefix, Type: "zone"}
	nodeOpts    = Options{Prefix: testPrefix, Type: "node"}
	clusterOpts = Options{Prefix: testPrefix, Type: "cluster"}
)

// pk returns the prefixed (full) key for a short key.
func pk(short string) string { return testPrefix + "/" + short }

// topo builds a topology from key, value pairs.
func topo(kv ...string) *csi.Topology {
	if len(kv)%2 != 0 {
		panic(fmt.Sprintf("topo: odd number of arguments %q", kv))
	}
	m := make(map[string]string, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &csi.Topology{Segments: m}
}

func topos(ts ...*csi.Topology) []*csi.Topology { return ts }

// kvs builds a map from key, value pairs.
func kvs(kv ...string) map[string]string { return topo(kv...).Segments }

// zoneEntry is an entry offering one zone by short key.
func zoneEntry(zone string) Entry { return Entry{Requirements: kvs("zone", zone)} }

// zoneTerm is a request term for one zone, with the full key as the CO sends it.
func zoneTerm(zone string) *csi.Topology { return topo(pk("zone"), zone) }
