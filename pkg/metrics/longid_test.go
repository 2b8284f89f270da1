package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestLongIDs: proxy_topology_long_ids_total is labelled by connection
// (only names that had a file; others are "(unknown)") and kind, never by
// volume.
func TestLongIDs(t *testing.T) {
	m := New()
	m.ConnectionLoaded("nas", false, nil)
	m.LongID("nas", "snapshot")
	m.LongID("nas", "snapshot")
	m.LongID("nas", "volume")
	m.LongID("never-loaded", "volume")
	err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP proxy_topology_long_ids_total Volume and snapshot IDs returned longer than the CSI limit of 128 bytes (proxy.maxIdLength unset), by connection and kind (volume, snapshot).
# TYPE proxy_topology_long_ids_total counter
proxy_topology_long_ids_total{connection="(unknown)",kind="volume"} 1
proxy_topology_long_ids_total{connection="nas",kind="snapshot"} 2
proxy_topology_long_ids_total{connection="nas",kind="volume"} 1
`), "proxy_topology_long_ids_total")
	if err != nil {
		t.Error(err)
	}
}

// TestLostReplies: proxy_topology_create_replies_lost_total counts the
// creates whose reply was lost, by connection and method.
func TestLostReplies(t *testing.T) {
	m := New()
	m.ConnectionLoaded("nas", false, nil)
	m.LostReply("nas", "CreateVolume")
	m.LostReply("nas", "CreateVolume")
	m.LostReply("never-loaded", "CreateSnapshot")
	err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP proxy_topology_create_replies_lost_total CreateVolume and CreateSnapshot calls whose upstream reply the proxy could not receive (over 16 MiB, or undecodable): the object may be left upstream, under the request's name (logged), by connection and method.
# TYPE proxy_topology_create_replies_lost_total counter
proxy_topology_create_replies_lost_total{connection="(unknown)",method="CreateSnapshot"} 1
proxy_topology_create_replies_lost_total{connection="nas",method="CreateVolume"} 2
`), "proxy_topology_create_replies_lost_total")
	if err != nil {
		t.Error(err)
	}
}
