package capability

import (
	"context"
	"math"
	"runtime/debug"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// When what the proxy advertises is computed (proxy.capabilities: auto),
// three things depend on when it is computed, because the kubernetes-csi
// sidecars wait for Probe to report ready, read the capabilities once, and
// act on them for the life of their process:
//
//   - Retries. An upstream that could not be asked (not listening yet at
//     start-up, say) is asked again soon, after 1s, 2s, 4s… up to the
//     refresh interval, not a minute later. A file that does not load, or
//     a loop, is not retried sooner: waiting does not fix it, an edit does.
//   - Readiness. Confirmed is closed once a refresh has asked every
//     connection and every upstream answered (files that do not load do
//     not count); the proxy's serve makes Probe ready then, or after a
//     short start-up grace, whichever comes first, so an install whose
//     upstream is down (or that has no connection at all: confirmed at
//     once) still becomes ready before the liveness probe gives up on it.
//   - Growth. When the set grows after Probe reported ready, the CSI
//     socket's client connections are closed (Options.Tracker): the
//     sidecars exit at their next call to the driver (gRPC reconnects
//     lazily, and csi-lib-utils' ExitOnConnectionLoss fires on the
//     reconnect), kubelet restarts them, and they read the new set. The
//     external-provisioner with --enable-capacity calls GetCapacity at
//     least every minute, so it exits within a minute even while it
//     refuses every claim. Kubelet dials per call, so only a call in
//     flight fails (and is retried). A set that shrinks or stays the same
//     closes nothing.
//
// A refresh is a batch: it reads and parses every connection file (10,000
// in the benchmark: some 200 MB of short-lived parse garbage and a hundred
// GC cycles), and the proxy is idle when it ends, so it gives that memory
// back to the OS at once (runtime/debug.FreeOSMemory: one GC, 4 ms
// measured with 10,000 files) instead of keeping the heap at its GC goal
// until the runtime's scavenger returns it. The idle controller of the
// benchmark holds about 3 MiB less for it (docs/performance.md).

// WatchCapabilities refreshes the capabilities at once, then every
// interval, and soon after ConnectionsChanged is called (at most once per
// minGap), until ctx ends. A refresh that leaves connections unconfirmed
// is followed by another after 1s, 2s, 4s… (capped at interval) until one
// confirms them all (Unconfirmed.Retry). interval 0 means one minute.
func (w *Watcher) Watch(ctx context.Context, interval time.Duration) {
	if (w.opts.Policy == nil || !w.opts.Policy.Auto()) && w.opts.Source.Guard() == nil {
		w.confirm()
		return
	}
	if interval <= 0 {
		interval = time.Minute
	}
	const minGap = 5 * time.Second
	retry := newRetryBackoff(interval)
	timer := time.NewTimer(0) // the first refresh runs at once
	defer timer.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-w.kick:
			if wait := minGap - time.Since(last); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
		}
		_, unconfirmed := w.Refresh(ctx)
		debug.FreeOSMemory()
		last = time.Now()
		next := interval
		if retrying(unconfirmed) {
			next = retry.Step()
		} else {
			retry = newRetryBackoff(interval)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
	}
}

// newRetryBackoff is the schedule of refreshes while some connection is
// unconfirmed: 1s, 2s, 4s…, then interval.
func newRetryBackoff(interval time.Duration) *wait.Backoff {
	return &wait.Backoff{Duration: min(time.Second, interval), Factor: 2, Cap: interval, Steps: math.MaxInt32}
}

// retrying says whether some unconfirmed connection may be confirmed by
// asking again soon.
func retrying(unconfirmed []Unconfirmed) bool {
	for _, u := range unconfirmed {
		if u.Retry {
			return true
		}
	}
	return false
}

// ConnectionsChanged asks WatchCapabilities for a refresh; it never
// blocks (the connection store calls it while loading a file).
func (w *Watcher) Kick() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Confirmed is closed once a refresh has asked every connection's
// upstream and each answered (at once with no connection, or with nothing
// auto); a connection whose file does not load does not hold it. serve makes Probe ready then, or after its start-up grace.
func (w *Watcher) Confirmed() <-chan struct{} { return w.confirmed }

func (w *Watcher) confirm() { w.confirmOnce.Do(func() { close(w.confirmed) }) }

// grew reports that the advertised set grew (not in the first refresh).
// Before Probe reported ready no sidecar has read the set, so it is only
// noted; after, the CSI socket's client connections are closed so that the
// sidecars restart and read it.
func (w *Watcher) grew(ctx context.Context, next Set, added, removed []string) {
	if !w.ready() {
		w.log.InfoContext(ctx, "advertised capabilities grew before Probe reported ready; the sidecars read them once it does",
			"added", strings.Join(added, ","), "removed", strings.Join(removed, ","))
		return
	}
	if t := w.opts.Tracker; t != nil {
		n := t.CloseLacking(next)
		if n == 0 {
			w.log.InfoContext(ctx, "advertised capabilities grew back to what every open CSI connection was told; nothing to restart",
				"added", strings.Join(added, ","), "removed", strings.Join(removed, ","))
			return
		}
		w.log.WarnContext(ctx, "advertised capabilities grew; closed the CSI socket's client connections that were told less, so that the sidecars (external-provisioner, -attacher, -resizer, -snapshotter), which read capabilities once, exit at their next call, are restarted by kubelet and read the new set",
			"added", strings.Join(added, ","), "removed", strings.Join(removed, ","), "connections_closed", n)
		return
	}
	w.log.WarnContext(ctx, "advertised capabilities grew; the CSI sidecars read them once at start-up, so restart them (external-provisioner, -resizer, -snapshotter, -attacher, -health-monitor) to use what was added",
		"added", strings.Join(added, ","), "removed", strings.Join(removed, ","))
}
