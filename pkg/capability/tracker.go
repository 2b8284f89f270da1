package capability

import (
	"net"
	"sync"
	"syscall"
)

// Tracker remembers the client connections a CSI listener accepted,
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
type Tracker struct {
	mu sync.Mutex
	// conns maps every open accepted connection to what it was told
	// (nil: nothing yet).
	conns map[net.Conn]*Set
	// told is what a connection accepted now is told; nil until the
	// driver advertises a set.
	told *Set
}

// Advertise sets what connections accepted from now on are told.
func (t *Tracker) Advertise(c Set) {
	t.mu.Lock()
	t.told = &c
	t.mu.Unlock()
}

// TellAll records that every open connection, and every one accepted
// from now on, has been told c: Probe reported ready, and the sidecars
// that waited for it read c.
func (t *Tracker) TellAll(c Set) {
	t.mu.Lock()
	t.told = &c
	for conn := range t.conns {
		t.conns[conn] = &c
	}
	t.mu.Unlock()
}

// CloseLacking closes every open connection that was not told all of
// next (or was told nothing) and reports how many it closed.
func (t *Tracker) CloseLacking(next Set) int {
	t.mu.Lock()
	t.forgetClosed()
	var lacking []net.Conn
	for conn, told := range t.conns {
		if told == nil {
			lacking = append(lacking, conn)
			continue
		}
		if added, _ := diff(*told, next); len(added) > 0 {
			lacking = append(lacking, conn)
		}
	}
	for _, conn := range lacking {
		delete(t.conns, conn)
	}
	t.mu.Unlock()
	for _, conn := range lacking {
		_ = conn.Close()
	}
	return len(lacking)
}

// Listener returns l with every connection it accepts tracked by t. The
// connections are handed to gRPC as accepted, not wrapped: gRPC reads a
// *net.UnixConn or *net.TCPConn only when data is ready, into a pooled
// buffer, and falls back to a 32 KiB buffer per connection, held while it
// waits, for any other type. A closed connection is noticed and forgotten
// on the tracker's next use (see open).
func (t *Tracker) Listener(l net.Listener) net.Listener {
	return &trackingListener{Listener: l, t: t}
}

// Len reports how many accepted connections are open.
func (t *Tracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.forgetClosed()
	return len(t.conns)
}

func (t *Tracker) add(c net.Conn) {
	t.mu.Lock()
	if t.conns == nil {
		t.conns = map[net.Conn]*Set{}
	}
	t.forgetClosed()
	t.conns[c] = t.told
	t.mu.Unlock()
}

// forgetClosed drops the connections closed since the last look, by
// either side (gRPC closes its end when the client goes). Called with t.mu
// held; the sidecars keep a handful of connections, so a look is cheap.
func (t *Tracker) forgetClosed() {
	for c := range t.conns {
		if !open(c) {
			delete(t.conns, c)
		}
	}
}

// open reports whether c has not been closed on this side. Every
// connection a unix or TCP listener accepts gives access to its socket;
// once closed, that access fails. A connection of any other kind is taken
// as open until the tracker closes it.
func open(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	return raw.Control(func(uintptr) {}) == nil
}

type trackingListener struct {
	net.Listener
	t *Tracker
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.t.add(c)
	return c, nil
}
