package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Removed connections. A connection label names a connection whose file
// exists: once its file is gone, its series are deleted and calls still
// naming it count as (unknown), so label values follow the files the admin
// keeps, not every file that ever existed in the process's life.

// removal finds the connections whose files are gone, before each scrape.
type removal struct {
	// list names the connections whose files exist now (the store's
	// List); nil until WatchConnections.
	list func() ([]string, error)
	// mu serialises drops (scrapes may overlap).
	mu sync.Mutex
	// gone are the names dropped by the last scrape: dropped once more by
	// the next, for a call that checked its label just before the drop
	// and counted just after it.
	gone []string
}

// WatchConnections keeps connection labels to connections that exist:
// before each scrape, list (the store's List) names the connections whose
// files exist, and a connection whose file is gone has its series deleted
// from every metric labelled by connection and is forgotten (calls naming
// it count as (unknown) until a file of that name is read again). When
// list fails nothing is dropped.
func (m *Metrics) WatchConnections(list func() ([]string, error)) {
	m.removal.mu.Lock()
	m.removal.list = list
	m.removal.mu.Unlock()
}

// gather is the registry's Gather after the removed connections are
// dropped; the /metrics handler serves it.
func (m *Metrics) gather() prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		m.dropRemoved()
		return m.reg.Gather()
	})
}

// dropRemoved deletes the series of connections whose files are gone. A
// name read after the listing began (its load number is newer) is kept:
// its file may have come back after the list was made.
func (m *Metrics) dropRemoved() {
	r := &m.removal
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.list == nil {
		return
	}
	start := m.loadSeq.Load()
	names, err := r.list()
	if err != nil {
		return
	}
	present := make(map[string]bool, len(names))
	for _, n := range names {
		present[n] = true
	}
	var gone []string
	m.known.Range(func(k, v any) bool {
		if name := k.(string); !present[name] && v.(uint64) <= start && m.known.CompareAndDelete(k, v) {
			gone = append(gone, name)
		}
		return true
	})
	for _, name := range append(r.gone, gone...) {
		if _, back := m.known.Load(name); back {
			continue
		}
		for _, v := range m.byConnection() {
			v.DeletePartialMatch(prometheus.Labels{"connection": name})
		}
	}
	r.gone = gone
}

// byConnection are the metrics labelled by connection.
func (m *Metrics) byConnection() []*prometheus.MetricVec {
	return []*prometheus.MetricVec{
		m.rpcs.MetricVec, m.rpcSeconds.MetricVec, m.upstreams.MetricVec, m.upstreamSeconds.MetricVec,
		m.loads.MetricVec, m.reloads.MetricVec, m.loadFailures.MetricVec, m.longIDs.MetricVec, m.lostReplies.MetricVec,
	}
}
