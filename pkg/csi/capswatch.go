package csi

import (
	"context"
	"time"

	"github.com/democratic-csi/proxy-topology/pkg/capability"
)

// What the driver advertises is decided in pkg/capability: Options.Policy
// (proxy.capabilities) resolved, refreshed from the connections' upstreams
// by a capability.Watcher, and the sidecars made to restart through
// Options.Accepted when it grows after Probe reported ready. The driver
// only serves the current set (capabilities.go); these are the watcher's
// controls, for serve.

// RefreshCapabilities refreshes the advertised set now (capability.Watcher.Refresh).
func (d *Driver) RefreshCapabilities(ctx context.Context) (capability.Set, []capability.Unconfirmed) {
	return d.caps.Refresh(ctx)
}

// WatchCapabilities refreshes the set at once, then every interval, and
// soon after ConnectionsChanged, until ctx ends (capability.Watcher.Watch).
func (d *Driver) WatchCapabilities(ctx context.Context, interval time.Duration) {
	d.caps.Watch(ctx, interval)
}

// ConnectionsChanged asks WatchCapabilities for a refresh; it never blocks.
func (d *Driver) ConnectionsChanged() { d.caps.Kick() }

// Confirmed is closed once a refresh has asked every connection's upstream
// and each answered (capability.Watcher.Confirmed).
func (d *Driver) Confirmed() <-chan struct{} { return d.caps.Confirmed() }
