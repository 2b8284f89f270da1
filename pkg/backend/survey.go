package backend

import (
	"context"
	"fmt"
	"sync"

	"github.com/democratic-csi/proxy-topology/pkg/connection"
	"github.com/democratic-csi/proxy-topology/pkg/upstream"
)

// Survey looks at connections for a background task (the proxy's
// capability refresh and its loop re-check) without caching any: a look is
// not a use (connection.Store.Look).
//
// A connection the cache holds is looked at with the clients its calls
// use. Any other gets clients for the look alone; they are leased from the
// Pool and held by the Survey, one lease per distinct client however many
// connections share it, so a survey keeps one entry per upstream, not one
// per connection, and asks a shared client (already built when some cached
// connection uses it) rather than building one per connection. Close gives
// the leases back: a client that no cached connection uses then closes.
type Survey struct {
	r *Registry

	mu     sync.Mutex
	leases map[*upstream.Client]*upstream.Lease
	closed bool
}

// Survey starts a survey; Close it when done.
func (r *Registry) Survey() *Survey {
	return &Survey{r: r, leases: map[*upstream.Client]*upstream.Lease{}}
}

// Look returns the connection called name with its clients and the
// function that releases it, as Registry.Get does; the clients stay usable
// until the Survey is closed. It fails as Get does (ErrInvalidName,
// ErrNotFound, ErrBroken, ErrUnavailable), but counts no load, runs no
// loop check (a surveyor that wants one runs it) and logs nothing.
func (v *Survey) Look(ctx context.Context, name string) (*Conn, func(), error) {
	c, err := v.r.cat.Look(name)
	if err != nil {
		return nil, nil, err
	}
	if a, ok := c.Attachment().(*Conn); ok {
		return a, c.Release, nil
	}
	v.mu.Lock()
	closed := v.closed
	v.mu.Unlock()
	if closed {
		c.Release()
		return nil, nil, fmt.Errorf("%w: connection %q: the survey is closed", connection.ErrUnavailable, name)
	}
	b, err := v.r.build(ctx, c, v)
	if err != nil {
		c.Release()
		return nil, nil, err
	}
	return b, c.Release, nil
}

// hold keeps l for the survey, or gives it back at once when the survey
// already holds a lease on the same client; it returns the client.
func (v *Survey) hold(l *upstream.Lease) *upstream.Client {
	c := l.Client()
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, held := v.leases[c]; held || v.closed {
		// held: the survey's own lease keeps c open. closed: a look that
		// raced with Close; its caller is done with c by the time Close
		// returned to the surveyor, which waits for its looks first.
		l.Release()
		return c
	}
	v.leases[c] = l
	return c
}

// Clients reports how many upstream clients the survey holds.
func (v *Survey) Clients() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.leases)
}

// Close releases the survey's leases; the connections it made must not be
// used after it. Later calls do nothing.
func (v *Survey) Close() {
	v.mu.Lock()
	leases := v.leases
	v.leases, v.closed = nil, true
	v.mu.Unlock()
	for _, l := range leases {
		l.Release()
	}
}
