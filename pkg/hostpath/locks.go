package hostpath

import (
	"context"
	"slices"
	"sync"

	"google.golang.org/grpc/status"
)

// keyedLocks serialises operations per volume or snapshot ID. IDs are
// derived from names, so locking the ID of a CreateVolume also serialises
// calls that repeat the same name.
type keyedLocks struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	ch   chan struct{} // holds one token while locked; a channel so waiting can be cancelled
	refs int           // holders and waiters; the entry is dropped at zero
}

func newKeyedLocks() *keyedLocks {
	return &keyedLocks{locks: make(map[string]*keyLock)}
}

// lock takes the locks of all keys and returns the function that releases
// them. Keys are taken in sorted order so that two operations on the same
// pair of IDs (a clone of A into B and of B into A) cannot deadlock. It
// gives up with the context's status when ctx ends first, so a CO that times
// out does not leave goroutines queued behind a long copy.
func (k *keyedLocks) lock(ctx context.Context, keys ...string) (unlock func(), err error) {
	keys = slices.Clone(keys)
	slices.Sort(keys)
	keys = slices.Compact(keys)

	held := make([]string, 0, len(keys))
	release := func() {
		for i := len(held) - 1; i >= 0; i-- {
			k.release(held[i])
		}
	}
	for _, key := range keys {
		l := k.acquireRef(key)
		select {
		case l.ch <- struct{}{}:
			held = append(held, key)
		case <-ctx.Done():
			k.dropRef(key)
			release()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	var once sync.Once
	return func() { once.Do(release) }, nil
}

func (k *keyedLocks) acquireRef(key string) *keyLock {
	k.mu.Lock()
	defer k.mu.Unlock()
	l, ok := k.locks[key]
	if !ok {
		l = &keyLock{ch: make(chan struct{}, 1)}
		k.locks[key] = l
	}
	l.refs++
	return l
}

func (k *keyedLocks) dropRef(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l := k.locks[key]
	l.refs--
	if l.refs == 0 {
		delete(k.locks, key)
	}
}

func (k *keyedLocks) release(key string) {
	k.mu.Lock()
	l := k.locks[key]
	k.mu.Unlock()
	<-l.ch
	k.dropRef(key)
}

// lockVolume locks the volume a request names. An ID local-hostpath could
// not have made is NOT_FOUND before it is used for anything, so no path is
// ever built from it.
func (d *Driver) lockVolume(ctx context.Context, id string) (func(), error) {
	if !validVolumeID(id) {
		return nil, notFound("volume %q not found (volume_id is not a local-hostpath volume id)", id)
	}
	return d.locks.lock(ctx, id)
}

// lockTeardown checks an unstage or unpublish request (volume_id, and the
// CO's path in field) and locks the volume. Teardown must succeed for any
// ID, known or not, so an ID local-hostpath could not have made is not an
// error: there is nothing to lock, and the returned unlock does nothing.
func (d *Driver) lockTeardown(ctx context.Context, id, field, path string) (func(), error) {
	if id == "" {
		return nil, invalidArgument("volume_id is required")
	}
	if err := checkCOPath(field, path); err != nil {
		return nil, err
	}
	// Teardown acts on the CO's path only, so a volume made under another
	// base path (marker.go) is unmounted too: it is locked by its ID.
	id = volumeIDOf(id)
	if !validVolumeID(id) {
		return func() {}, nil
	}
	return d.locks.lock(ctx, id)
}
