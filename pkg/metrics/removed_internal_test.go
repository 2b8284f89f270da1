package metrics

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
)

// TestDropRemovedRaces: a connection read while the scrape lists the files
// (its file came back after the listing looked) keeps its label; a
// series a call adds just after its connection was dropped goes at the
// next scrape; a listing that fails drops nothing.
func TestDropRemovedRaces(t *testing.T) {
	m := New()
	m.ConnectionLoaded("back", false, nil)
	m.ConnectionLoaded("gone", false, nil)
	m.ObserveRPC("CreateVolume", "gone", codes.OK, 0)
	var listErr error
	listing := []string{}
	m.WatchConnections(func() ([]string, error) {
		m.ConnectionLoaded("back", true, nil) // read again while listing
		return listing, listErr
	})
	count := func(conn string) int {
		t.Helper()
		n := 0
		families, err := m.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			for _, s := range f.GetMetric() {
				for _, l := range s.GetLabel() {
					if l.GetName() == "connection" && l.GetValue() == conn {
						n++
					}
				}
			}
		}
		return n
	}

	listErr = errors.New("secret not synced")
	m.dropRemoved()
	if count("gone") == 0 {
		t.Fatal("a failed listing dropped series")
	}
	listErr = nil
	m.dropRemoved()
	if _, ok := m.known.Load("back"); !ok || count("back") == 0 {
		t.Error("a connection read during the listing lost its label")
	}
	if _, ok := m.known.Load("gone"); ok || count("gone") != 0 {
		t.Errorf("a removed connection is still known (%v) or has %d series", ok, count("gone"))
	}
	// A call that checked its label before the drop counts after it.
	m.rpcs.WithLabelValues("CreateVolume", "gone", "OK").Inc()
	m.dropRemoved()
	if n := count("gone"); n != 0 {
		t.Errorf("a series added just after the drop is still there at the next scrape (%d)", n)
	}
}
