package connection

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"sync"

	"github.com/democratic-csi/proxy-topology/pkg/ids"
	"github.com/democratic-csi/proxy-topology/pkg/upstream"
)

// Survey looks at connections for a background task (the proxy's
// capability refresh and its loop re-check) without caching any: a look is
// not a use. With ten thousand connection files, a survey of them all
// leaves the cache as it found it, so an idle proxy holds only the
// connections its calls use, and an unused one still expires after the
// cache timeout however often it is surveyed.
//
// A connection the cache holds is looked at as it is. Any other is made
// from its file for the look alone; its upstream clients are leased from
// the Pool and held by the Survey, one lease per distinct client however
// many connections share it, so a survey keeps one entry per upstream, not
// one per connection, and asks a shared client (already built when some
// cached connection uses it) rather than building one per connection.
// Close gives the leases back: a client that no cached connection uses
// then closes.
type Survey struct {
	s *Store

	mu     sync.Mutex
	leases map[*upstream.Client]*upstream.Lease
	closed bool
}

// Survey starts a survey; Close it when done.
func (s *Store) Survey() *Survey {
	return &Survey{s: s, leases: map[*upstream.Client]*upstream.Lease{}}
}

// Look returns the connection called name, with a reference the caller
// gives back with Release; its clients stay usable until the Survey is
// closed. It fails as Get does (ErrInvalidName, ErrNotFound, ErrBroken,
// ErrUnavailable), but counts no load (Options.OnLoad), runs no
// Options.Check (a surveyor that wants one runs it) and logs nothing.
func (v *Survey) Look(ctx context.Context, name string) (*Connection, error) {
	s := v.s
	if err := ids.ValidateConnectionName(name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidName, err)
	}
	now := s.opts.Now()
	ver, err := s.src.Stat(name, now)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			s.forget(name, nil)
			return nil, noFile(name, s.src.Describe(name))
		}
		return nil, broken(name, err)
	}
	// A survey sweeps like a Get, so the connections of an idle proxy
	// expire (and release their clients) within a refresh of their time.
	at := int64(now.Sub(s.epoch))
	s.sweep(now, at)
	if c := s.cachedConn(name, at, func(e *entry) bool { return e.version == ver }); c != nil {
		return c, nil
	}
	data, err := s.src.Read(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, noFile(name, s.src.Describe(name))
	case err != nil:
		return nil, broken(name, err)
	}
	// A version that cannot be trusted (changed too recently to tell) is
	// the cached connection still if the content is the same.
	if c := s.cachedConn(name, at, func(e *entry) bool { return e.read && e.sum == sha256.Sum256(data) }); c != nil {
		return c, nil
	}
	v.mu.Lock()
	closed := v.closed
	v.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("%w: connection %q: the survey is closed", ErrUnavailable, name)
	}
	return s.load(ctx, name, s.src.Describe(name), data, v)
}

// cachedConn returns, with a reference for the caller, the connection
// cached for name if it has not expired at at and same says it is of the
// file as it is now; its last use is left alone. With cacheTimeout 0
// nothing is served from the cache.
func (s *Store) cachedConn(name string, at int64, same func(*entry) bool) *Connection {
	if s.opts.CacheTimeout == 0 {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, cached := s.entries[name]
	if !cached || e.conn == nil || s.expired(e, at) || !same(e) {
		return nil
	}
	// The entry holds a reference while it is in the map.
	e.conn.refs.Add(1)
	return e.conn
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
