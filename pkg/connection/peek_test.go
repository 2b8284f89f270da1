package connection

import (
	"context"
	"testing"
	"time"
)

// TestPeekIsNotAUse: Peek returns the cached connection like Get, but
// leaves its last use alone, so a background look (the capability
// refresh) never keeps an unused connection from expiring.
func TestPeekIsNotAUse(t *testing.T) {
	const ttl = 10 * time.Minute
	e := newEnv(t, ttl)
	e.write("a", connA)
	a := e.get("a")
	peek := func() *Connection {
		t.Helper()
		c, err := e.store.Peek(context.Background(), "a")
		if err != nil {
			t.Fatal(err)
		}
		c.Release()
		return c
	}
	for i := 0; i < 2; i++ {
		e.clock.Advance(4 * time.Minute)
		if peek() != a {
			t.Errorf("Peek after %d min: a new connection, want the cached one", 4*(i+1))
		}
	}
	e.clock.Advance(3 * time.Minute)
	// 11 minutes since the last Get: expired, however often it was peeked.
	if n := e.store.Cached(); n != 0 {
		t.Errorf("Cached() = %d, want 0: peeks kept a from expiring", n)
	}
	// A peek after that loads it again, like a Get.
	if peek() == a {
		t.Error("Peek returned the expired connection")
	}
}
