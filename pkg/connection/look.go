package connection

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"

	"github.com/democratic-csi/proxy-topology/pkg/ids"
)

// Look returns the connection called name for a background task (the
// proxy's capability refresh, its loop re-check) without caching it: a
// look is not a use. With ten thousand connection files, looking at them
// all leaves the cache as it found it, so an idle proxy holds only the
// connections its calls use, and an unused one still expires after the
// cache timeout however often it is looked at.
//
// A connection the cache holds is returned as it is, with its attachment;
// any other is made from its file for the look alone, with no attachment.
// Either comes with a reference the caller gives back with Release. Look
// fails as Get does (ErrInvalidName, ErrNotFound, ErrBroken), but counts
// no load (Options.OnLoad) and logs nothing.
func (s *Store) Look(name string) (*Connection, error) {
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
		return nil, Broken(name, err)
	}
	// A look sweeps like a Get, so the connections of an idle proxy
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
		return nil, Broken(name, err)
	}
	// A version that cannot be trusted (changed too recently to tell) is
	// the cached connection still if the content is the same.
	if c := s.cachedConn(name, at, func(e *entry) bool { return e.read && e.sum == sha256.Sum256(data) }); c != nil {
		return c, nil
	}
	return s.load(name, s.src.Describe(name), data, true)
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
