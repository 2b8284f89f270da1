package csi

import (
	"net"
	"sync"
)

// ConnTracker remembers the client connections a CSI listener accepted,
// so that they can all be closed at once (CloseAll) while the listener
// keeps accepting new ones. The proxy closes them when what it advertises
// grows: the kubernetes-csi sidecars read capabilities once and exit when
// they find their connection to the driver dropped, at their next call
// (csi-lib-utils connection.ExitOnConnectionLoss), so kubelet restarts
// them and they read the new set. Its zero value is ready to use.
type ConnTracker struct {
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

// Listener returns l with every connection it accepts tracked by t.
func (t *ConnTracker) Listener(l net.Listener) net.Listener {
	return &trackingListener{Listener: l, t: t}
}

// CloseAll closes every tracked connection that is still open and reports
// how many it closed.
func (t *ConnTracker) CloseAll() int {
	t.mu.Lock()
	conns := t.conns
	t.conns = nil
	t.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
	return len(conns)
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
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.t.remove(c) })
	return c.Conn.Close()
}
