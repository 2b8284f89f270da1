// Package metrics exposes the proxy's Prometheus metrics, and its /healthz
// and /readyz endpoints, on one HTTP address (--metrics-address).
//
// New makes a private registry; serve hands the pieces to the parts they
// watch: Metrics is the csi.Observer of the gRPC server (one count and one
// latency per served call), UpstreamObserver watches the upstream pool,
// ConnectionLoaded is the connection store's OnLoad hook, and WatchCache,
// WatchConnections and WatchReady read the store and the readiness state
// at scrape time.
// Handler (http.go) serves the registry and the two probes.
//
// Every label set is bounded by what the admin configures, never by what a
// caller sends: method is one of the CSI methods the server registers
// (gRPC answers unknown methods before any interceptor runs); code is a
// gRPC code; connection is a name that has a connection file, and
// "(unknown)" for every other name a call carries, so a typo in a
// StorageClass or a forged volume ID cannot add series, and the series of
// a removed connection are deleted (WatchConnections, removed.go); endpoint
// comes from a connection file; rule and key come from the main config.
// Nothing is labelled by volume ID, snapshot ID or request name.
package metrics

import (
	"context"
	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc/codes"

	"github.com/democratic-csi/proxy-topology/pkg/nodetopology"
)

const namespace = "proxy_topology"

// UnknownConnection is the connection label of a call naming a connection
// that has no file (a typo in a StorageClass, a deleted connection, a
// garbage volume ID). Labelling such calls with the name itself would let
// any caller create series at will; parentheses never occur in a real
// connection name, so the two cannot collide.
const UnknownConnection = "(unknown)"

// durationBuckets span a Probe (sub-millisecond) to a CreateVolume that
// copies a snapshot or waits on a slow array (minutes).
var durationBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// Metrics holds every metric of one process in a private registry, so two
// proxies in one test binary never share counters.
type Metrics struct {
	reg *prometheus.Registry

	rpcs            *prometheus.CounterVec
	rpcSeconds      *prometheus.HistogramVec
	upstreams       *prometheus.CounterVec
	upstreamSeconds *prometheus.HistogramVec
	loads           *prometheus.CounterVec
	reloads         *prometheus.CounterVec
	loadFailures    *prometheus.CounterVec
	longIDs         *prometheus.CounterVec
	lostReplies     *prometheus.CounterVec
	rules           *prometheus.GaugeVec
	segments        prometheus.Gauge
	build           *prometheus.GaugeVec

	// known maps each connection name the store has read a file for, and
	// whose file has not been seen gone since (removed.go), to the number
	// of its last load (loadSeq): only these names become label values
	// (see UnknownConnection).
	known   sync.Map
	loadSeq atomic.Uint64
	removal removal
}

// New registers the proxy's metrics and the Go runtime and process
// collectors in a new registry.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		rpcs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "csi_requests_total",
			Help: "CSI calls served, by method, connection (\"\" when the call names none) and gRPC code.",
		}, []string{"method", "connection", "code"}),
		rpcSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "csi_request_duration_seconds",
			Help:    "Time to serve a CSI call, by method and connection.",
			Buckets: durationBuckets,
		}, []string{"method", "connection"}),
		upstreams: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "upstream_requests_total",
			Help: "Calls to upstream CSI drivers, by connection, endpoint, method and gRPC code; code!=\"OK\" are the errors.",
		}, []string{"connection", "endpoint", "method", "code"}),
		upstreamSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "upstream_request_duration_seconds",
			Help:    "Time an upstream CSI driver took to answer, by connection, endpoint and method.",
			Buckets: durationBuckets,
		}, []string{"connection", "endpoint", "method"}),
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "connection_loads_total",
			Help: "Connection files read and parsed, successful or not, first loads and reloads.",
		}, []string{"connection"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "connection_reloads_total",
			Help: "Loads that replaced a cached connection because its file changed.",
		}, []string{"connection"}),
		loadFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "connection_load_failures_total",
			Help: "Loads that failed: the file does not parse or validate, or its upstream cannot be set up.",
		}, []string{"connection"}),
		longIDs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "long_ids_total",
			Help: "Volume and snapshot IDs returned longer than the CSI limit of 128 bytes (proxy.maxIdLength unset), by connection and kind (volume, snapshot).",
		}, []string{"connection", "kind"}),
		lostReplies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "create_replies_lost_total",
			Help: "CreateVolume and CreateSnapshot calls whose upstream reply the proxy could not receive (over 16 MiB, or undecodable): the object may be left upstream, under the request's name (logged), by connection and method.",
		}, []string{"connection", "method"}),
		rules: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "node_topology_rule",
			Help: "1 for the status each node topology rule had at start-up (rule=\"base\" is the segment of nodeTopology.type).",
		}, []string{"rule", "key", "status"}),
		segments: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "node_topology_segments",
			Help: "Topology segments this node reports; 0 means NodeGetInfo fails and the node cannot register.",
		}),
		build: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "build_info",
			Help: "Always 1; the labels describe the running process.",
		}, []string{"version", "csi_name", "mode"}),
	}
	m.reg.MustRegister(m.rpcs, m.rpcSeconds, m.upstreams, m.upstreamSeconds,
		m.loads, m.reloads, m.loadFailures, m.longIDs, m.lostReplies, m.build,
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: namespace, Name: "local_hostpath_fsyncs_total",
			Help: "fsync and fdatasync calls the built-in local-hostpath driver made for its state (journal, records, new directories), all connections together.",
		}, func() float64 { return float64(hostpath.Counters().Fsyncs) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: namespace, Name: "local_hostpath_directory_operations_total",
			Help: "Directory entries the built-in local-hostpath driver made, renamed or removed for its state and volumes, all connections together.",
		}, func() float64 { return float64(hostpath.Counters().DirOps) }),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is where the metrics live; tests gather from it.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// SetBuildInfo sets the labels of proxy_topology_build_info. The driver
// name is known only once the config is loaded, after the metrics server
// has started.
func (m *Metrics) SetBuildInfo(version, csiName, mode string) {
	m.build.Reset()
	m.build.WithLabelValues(version, csiName, mode).Set(1)
}

// connection returns the label value for a connection name.
func (m *Metrics) connection(name string) string {
	if name == "" {
		return ""
	}
	if _, ok := m.known.Load(name); ok {
		return name
	}
	return UnknownConnection
}

// ObserveRPC counts one served CSI call; it implements csi.Observer.
func (m *Metrics) ObserveRPC(method, connection string, code codes.Code, d time.Duration) {
	conn := m.connection(connection)
	m.rpcs.WithLabelValues(method, conn, code.String()).Inc()
	m.rpcSeconds.WithLabelValues(method, conn).Observe(d.Seconds())
}

// ObserveUpstream counts one call to an upstream driver. method may be the
// full gRPC name; only the part after the last '/' is kept.
func (m *Metrics) ObserveUpstream(connection, endpoint, method string, code codes.Code, d time.Duration) {
	method = method[strings.LastIndexByte(method, '/')+1:]
	conn := m.connection(connection)
	m.upstreams.WithLabelValues(conn, endpoint, method, code.String()).Inc()
	m.upstreamSeconds.WithLabelValues(conn, endpoint, method).Observe(d.Seconds())
}

// LongID counts one ID returned over the CSI limit; it has the signature
// of csi.Options.OnLongID. kind is "volume" or "snapshot".
func (m *Metrics) LongID(connection, kind string) {
	m.longIDs.WithLabelValues(m.connection(connection), kind).Inc()
}

// LostReply counts one create whose upstream reply was lost, so the object
// may be left upstream; it has the signature of csi.Options.OnLostReply.
// method is CreateVolume or CreateSnapshot.
func (m *Metrics) LostReply(connection, method string) {
	m.lostReplies.WithLabelValues(m.connection(connection), method).Inc()
}

// UpstreamObserver adapts ObserveUpstream to upstream.Pool.SetObserver;
// connectionOf tells which connection a call's context belongs to.
func (m *Metrics) UpstreamObserver(connectionOf func(context.Context) string) func(context.Context, string, string, codes.Code, time.Duration) {
	return func(ctx context.Context, target, method string, code codes.Code, d time.Duration) {
		m.ObserveUpstream(connectionOf(ctx), target, method, code, d)
	}
}

// ConnectionLoaded counts one read of a connection file; it has the
// signature of connection.Options.OnLoad.
func (m *Metrics) ConnectionLoaded(name string, reload bool, err error) {
	m.known.Store(name, m.loadSeq.Add(1))
	m.loads.WithLabelValues(name).Inc()
	if reload {
		m.reloads.WithLabelValues(name).Inc()
	}
	if err != nil {
		m.loadFailures.WithLabelValues(name).Inc()
	}
}

// WatchCache exports cached(), read at scrape time, as
// proxy_topology_connections_cached.
func (m *Metrics) WatchCache(cached func() int) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Name: "connections_cached",
		Help: "Connections in the cache: loaded, and used within the cache timeout.",
	}, func() float64 { return float64(cached()) }))
}

// WatchReady exports ready(), read at scrape time, as proxy_topology_ready.
func (m *Metrics) WatchReady(ready func() error) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Name: "ready",
		Help: "1 when the config is loaded and the CSI socket is serving (what /readyz and Probe report).",
	}, func() float64 {
		if ready() != nil {
			return 0
		}
		return 1
	}))
}

// SetNodeTopology records what the node topology rules did at start-up.
// Only node-serving processes evaluate rules, so only they export these.
func (m *Metrics) SetNodeTopology(res nodetopology.Result) {
	if err := m.reg.Register(m.rules); err == nil {
		_ = m.reg.Register(m.segments)
	}
	m.rules.Reset()
	if b := res.Base; b != nil {
		m.rules.WithLabelValues("base", b.Key, b.Status).Set(1)
	}
	for _, r := range res.Rules {
		m.rules.WithLabelValues(strconv.Itoa(r.Index), r.Key, r.Status).Set(1)
	}
	m.segments.Set(float64(len(res.Segments)))
}
