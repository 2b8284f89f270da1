package csi

import (
	"net"
	"sync"
)

// ConnTracker remembers the client connections a CSI listener accepted,
// and for each the capabilities it was told (what was advertised when it
// was accepted, or when Probe first reported ready for those accepted
// before), so that the proxy can close those that lack something it now
// advertises (CloseLacking) while the listener keeps accepting new ones.
// The kubernetes-csi sidecars read capabilities once and exit when they
// find their connection to the driver dropped, at their next call
// (csi-lib-utils connection.ExitOnConnectionLoss), so kubelet restarts
// them and they read the new set. A connection told a set is left alone
// when the set shrinks and grows back to it (a connection file broken for
// a moment while it is edited), so edits do not restart the sidecars.
// Its zero value is ready to use.
type ConnTracker struct {
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
	// told is what a connection accepted now is told; nil until the
	// driver advertises a set.
	told *Capabilities
}

// Advertise sets what connections accepted from now on are told.
func (t *ConnTracker) Advertise(c Capabilities) {
	t.mu.Lock()
	t.told = &c
	t.mu.Unlock()
}

// TellAll records that every open connection, and every one accepted
// from now on, has been told c: Probe reported ready, and the sidecars
// that waited for it read c.
func (t *ConnTracker) TellAll(c Capabilities) {
	t.mu.Lock()
	t.told = &c
	for tc := range t.conns {
		tc.told = &c
	}
	t.mu.Unlock()
}

// CloseLacking closes every open connection that was not told all of
// next (or was told nothing) and reports how many it closed.
func (t *ConnTracker) CloseLacking(next Capabilities) int {
	t.mu.Lock()
	var lacking []*trackedConn
	for tc := range t.conns {
		if tc.told == nil {
			lacking = append(lacking, tc)
			continue
		}
		if added, _ := capsDiff(*tc.told, next); len(added) > 0 {
			lacking = append(lacking, tc)
		}
	}
	for _, tc := range lacking {
		delete(t.conns, tc)
	}
	t.mu.Unlock()
	for _, tc := range lacking {
		_ = tc.Close()
	}
	return len(lacking)
}

// Listener returns l with every connection it accepts tracked by t.
func (t *ConnTracker) Listener(l net.Listener) net.Listener {
	return &trackingListener{Listener: l, t: t}
}

// Len reports how many accepted connections are open.
func (t *ConnTracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

func (t *ConnTracker) add(c *trackedConn) {
	t.mu.Lock()
	if t.conns == nil {
		t.conns = map[*trackedConn]struct{}{}
	}
	c.told = t.told
	t.conns[c] = struct{}{}
	t.mu.Unlock()
}

func (t *ConnTracker) remove(c *trackedConn) {
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
}

type trackingListener struct {
	net.Listener
	t *ConnTracker
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, t: l.t}
	l.t.add(tc)
	return tc, nil
}

// trackedConn leaves its tracker when it is closed, by either side.
type trackedConn struct {
	net.Conn
	t    *ConnTracker
	once sync.Once
	told *Capabilities // guarded by t.mu
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.t.remove(c) })
	return c.Conn.Close()
}
