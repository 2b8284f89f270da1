package capability

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/backend"
)

// DefaultTimeout bounds the capability calls to one upstream in a
// refresh.
const DefaultTimeout = 5 * time.Second

// refreshWorkers is how many upstreams a refresh asks at once, so one that
// hangs costs its timeout once, not once per connection after it.
const refreshWorkers = 8

// Source is where a Watcher finds the connections: pkg/backend's Registry.
type Source interface {
	// List names the connections, sorted; Location names where they
	// come from, for messages.
	List() ([]string, error)
	Location() string
	// Survey looks at connections without using them.
	Survey() *backend.Survey
	// Guard is the loop guard the refresh re-checks connections with;
	// nil: none.
	Guard() *backend.SelfGuard
}

// Options configures a Watcher. Zero values are noted per field.
type Options struct {
	// Source holds the connections. Required.
	Source Source
	// Policy is proxy.capabilities: its auto parts are computed from the
	// upstreams by Refresh (until the first refresh they advertise
	// nothing), its explicit parts advertised as given. nil: Static.
	Policy *Policy
	// Static is advertised when Policy is nil; zero means everything
	// supported except controller publishing, with online expansion
	// (Resolve).
	Static Set
	// Tracker, if set, tracks the CSI socket's client connections: when
	// the set grows after Ready, those told less are closed so that the
	// sidecars restart and read it. nil closes nothing and only warns.
	Tracker *Tracker
	// Timeout bounds the capability calls to one upstream in a refresh;
	// 0 means DefaultTimeout.
	Timeout time.Duration
	// Topology is the proxy's topology options (node-local connections
	// are found with them).
	Topology accessible.Options
	// AskController and AskNode say which of an upstream's services are
	// asked: the proxy's mode serves them.
	AskController, AskNode bool
	// WarnCentralNodeLocal is set for a controller-only process outside
	// the node-local mode (the central Deployment): a refresh that finds
	// node-local connections warns, naming them and NodeID, whenever they
	// differ from those it last warned about (nodelocal.go).
	WarnCentralNodeLocal bool
	NodeID               string
	// Ready says whether Probe has reported ready (the sidecars have read
	// the set); nil: never.
	Ready func() bool
	// Log receives the watcher's messages; nil means slog.Default().
	Log *slog.Logger
}

// Watcher holds the set the proxy advertises and keeps it up to date
// with the connections' upstreams (Refresh, Watch).
type Watcher struct {
	opts Options
	log  *slog.Logger
	set  atomic.Pointer[Set]

	// mu serialises refreshes; refreshed says whether one has completed
	// (growth is warned about only after it); kick asks Watch for one
	// now.
	mu        sync.Mutex
	refreshed bool
	kick      chan struct{}
	// nodeLocalWarned are the node-local connections last warned about
	// (WarnCentralNodeLocal); mu guards it.
	nodeLocalWarned []string
	// confirmed is closed once a refresh confirmed every connection
	// (Confirmed).
	confirmed   chan struct{}
	confirmOnce sync.Once
}

// NewWatcher returns a watcher advertising, until its first refresh, the
// Policy's explicit parts (nothing auto) or Static.
func NewWatcher(o Options) *Watcher {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	set := o.Static
	if set.Controller == nil && set.Node == nil {
		set, _ = Resolve(nil, nil, false)
	}
	if o.Policy != nil {
		set = o.Policy.Aggregate(nil)
	}
	w := &Watcher{opts: o, log: o.Log, kick: make(chan struct{}, 1), confirmed: make(chan struct{})}
	w.set.Store(&set)
	return w
}

// Current returns what is advertised now.
func (w *Watcher) Current() Set { return *w.set.Load() }

func (w *Watcher) ready() bool { return w.opts.Ready != nil && w.opts.Ready() }
