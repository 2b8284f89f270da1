// Package csi is the proxy's CSI server: the Identity, Controller and Node
// services, each call routed to the connection it belongs to.
//
// Every call takes one path. gRPC decodes the request into the generated
// type; the interceptor (interceptors.go) numbers it, logs it once and
// counts it for metrics, and turns a panic into INTERNAL; the handler
// validates the request, finds its connection, makes the outbound copy,
// forwards it and rewrites the answer; gRPC encodes it. NewServer
// (server.go) builds that server for production and for every test alike.
//
// A guide to the files:
//
//   - server.go: NewServer; listen.go: the socket (Listen);
//     interceptors.go: request id, logging, observers, panic recovery.
//   - driver.go: Options and the Driver, Register (the services of a mode).
//   - routing.go: from a request to its connection, asked of the
//     Connections interface (pkg/backend's Registry). routeVolume and
//     routeSnapshot resolve an ID, NOT_FOUND if the proxy never made it;
//     routeRemoval is for idempotent clean-up, where such an ID names
//     nothing and there is nothing to do; connectionFromParameters reads
//     the StorageClass parameter.
//   - forward.go: the one place an upstream is called (forward), with the
//     connection's timeout, its capability checks (controllerHas, nodeHas,
//     answered from pkg/upstream's cache) and its errors mapped to statuses;
//     merge and mergeParameters build what the upstream is sent.
//   - outbound.go: outbound, the copy of a request a handler may edit; the
//     inbound request is never changed.
//   - One file per CSI concern: identity.go (plugin info, Probe),
//     capabilities.go (what is advertised), create.go (CreateVolume, clone
//     and restore, rollback of what cannot be handed back), volume.go (calls
//     on an existing volume: delete, validate, get, expand, modify),
//     snapshot.go, publish.go (controller publish and unpublish),
//     capacity.go, health.go (volume health), list.go (ListVolumes and
//     ListSnapshots across connections, list tokens), node.go (stage,
//     publish, stats, expand on the node), group.go (connection groups,
//     SPEC §11: the member a CreateVolume goes to, a group's capacity).
//   - placement.go: Placement, the glue to accessible.Placement, which
//     makes every decision of where a connection's volumes may be
//     (CreateVolume's accessible_topology, an upstream's answer translated
//     by upstreamTopology or never widened, GetCapacity's admission,
//     existing volumes' topology, a group's member choice, node-local
//     connections pinned to this controller's node); the topology dry run
//     predicts with the same methods.
//   - Forwarding to drivers the proxy did not write: what is advertised
//     is decided in pkg/capability (proxy.capabilities: auto, recomputed
//     as connections change, the sidecars restarted when it grows; the
//     loop guard's re-check runs in its refresh), served by
//     capabilities.go and controlled through capswatch.go; idlength.go
//     (IDs over 128 bytes, proxy.maxIdLength).
//
// The proxy keeps no state of its own: IDs carry their connection
// (pkg/ids), connections and their clients come from pkg/backend (over
// pkg/connection's catalogue and pkg/upstream's clients), topology
// decisions from pkg/accessible.
package csi

import (
	"context"
	"log/slog"
	"sync/atomic"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"

	"github.com/democratic-csi/proxy-topology/pkg/backend"
	"github.com/democratic-csi/proxy-topology/pkg/capability"
)

// Modes select which services a process serves.
const (
	ModeAll        = "all"
	ModeController = "controller"
	ModeNode       = "node"
)

// ConnectionParameter is the StorageClass parameter naming the connection.
const ConnectionParameter = "connection"

// Connections is what the CSI layer asks for connections: the connection
// a call routes to with its upstream clients, and the names that exist.
// pkg/backend's Registry implements it. Every *backend.Conn comes with the
// function that releases it: a handler gets, uses, and releases
// (defer release()) where the reader sees it.
type Connections interface {
	// Get returns the connection called name and its release function;
	// its errors wrap pkg/connection's sentinels (ConnectionError maps
	// them).
	Get(ctx context.Context, name string) (*backend.Conn, func(), error)
	// Member returns member i of group g, as Get does.
	Member(ctx context.Context, g *backend.Conn, i int) (*backend.Conn, func(), error)
	// List names the connections that exist, sorted; Location names
	// where they come from, for messages.
	List() ([]string, error)
	Location() string
	// Survey starts a look at connections that is not a use (the
	// capability refresh).
	Survey() *backend.Survey
	// Guard is the loop guard that checks connections when their clients
	// are built; the driver publishes its loop markers in GetPluginInfo
	// and re-checks the connections with it on every capability refresh.
	// nil: no loop checks. The registry owns it: it is wired once.
	Guard() *backend.SelfGuard
}

// Driver implements the proxy's CSI services.
type Driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	opts Options
	// caps is what the driver advertises, kept up to date with the
	// connections' upstreams (pkg/capability).
	caps  *capability.Watcher
	log   *slog.Logger
	ready atomic.Bool

	longIDs longIDs
}

// New returns a driver; it reports ready to Probe once SetReady is called.
func New(opts Options) (*Driver, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	d := &Driver{opts: opts, log: opts.Log}
	d.caps = capability.NewWatcher(capability.Options{
		Source: opts.Connections, Policy: opts.Policy, Static: opts.Capabilities, Tracker: opts.Accepted,
		Timeout: opts.CapabilityTimeout, Topology: opts.Topology,
		AskController: opts.Mode != ModeNode, AskNode: opts.Mode != ModeController,
		WarnCentralNodeLocal: opts.WarnCentralNodeLocal, NodeID: opts.NodeID,
		Ready: d.ready.Load, Log: opts.Log,
	})
	return d, nil
}

// SetReady makes Probe report ready. The sidecars that waited for it read
// the capabilities now, so every open CSI connection counts as told them
// (capability.Tracker).
func (d *Driver) SetReady(ready bool) {
	if ready && !d.ready.Load() {
		if t := d.opts.Accepted; t != nil {
			t.TellAll(d.Capabilities())
		}
	}
	d.ready.Store(ready)
}

// Register adds the services of the driver's mode to s.
func (d *Driver) Register(s *grpc.Server) {
	csi.RegisterIdentityServer(s, d)
	if d.opts.Mode != ModeNode {
		csi.RegisterControllerServer(s, d)
	}
	if d.opts.Mode != ModeController {
		csi.RegisterNodeServer(s, d)
	}
}
