package connection

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestGroupLoads: a group file loads like any connection file (cached,
// reloaded when it changes, dropped when it goes), without an upstream.
func TestGroupLoads(t *testing.T) {
	e := newEnv(t, -1)
	e.Write("a", connA)
	e.Write("b", connB)
	e.Write("zones", "driver: group\ngroup:\n  members: [a, b]\n")
	g := e.get("zones")
	if !g.IsGroup() || g.Config.Driver != "group" {
		t.Fatalf("group loaded as %+v", g)
	}
	if diff := cmp.Diff([]string{"a", "b"}, g.Members()); diff != "" {
		t.Errorf("members (-want +got):\n%s", diff)
	}
	if e.get("a").IsGroup() || e.get("a").Members() != nil {
		t.Error("an ordinary connection reports itself a group")
	}
	n := e.loadCount()
	if e.get("zones") != g || e.loadCount() != n {
		t.Error("an unchanged group file was loaded again")
	}
	e.Replace("zones", "driver: group\ngroup:\n  members: [b]\n")
	if got := e.get("zones").Members(); !cmp.Equal(got, []string{"b"}) {
		t.Errorf("after the edit: members %v", got)
	}
}

// TestGroupBroken: a broken group fails only itself, with the file's
// error; a group listing itself is broken.
func TestGroupBroken(t *testing.T) {
	e := newEnv(t, -1)
	e.Write("a", connA)
	e.Write("bad", "driver: group\ngroup:\n  members: [a, a]\n")
	e.Write("self", "driver: group\ngroup:\n  members: [a, self]\n")
	for name, want := range map[string]string{
		"bad":  `group.members[1]: "a" is already group.members[0]`,
		"self": `group.members[1]: the group "self" lists itself`,
	} {
		_, err := e.store.Get(context.Background(), name)
		if !errors.Is(err, ErrBroken) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), e.Path(name)) {
			t.Errorf("Get(%s): %v; want ErrBroken with %q and the file", name, err, want)
		}
	}
	e.get("a") // the others keep working
}

// TestGroupMember: members are checked on every call, since they can
// change at run time: a missing member, a broken one and one that is a
// group are errors naming the group and the member.
func TestGroupMember(t *testing.T) {
	e := newEnv(t, -1)
	e.Write("a", connA)
	e.Write("zones", "driver: group\ngroup:\n  members: [a, missing, inner, broken]\n")
	e.Write("inner", "driver: group\ngroup:\n  members: [a]\n")
	e.Write("broken", "driver: csi\n")
	g, err := e.store.Get(context.Background(), "zones")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release()
	m, err := e.member(g, 0)
	if err != nil || m.Name != "a" {
		t.Fatalf("member 0: %v %v", m, err)
	}
	m.Release()
	for i, tc := range []struct {
		sentinel error
		want     string
	}{
		1: {ErrNotFound, `group "zones": member "missing" (group.members[1]): connection not found`},
		2: {ErrBroken, `group "zones": member "inner" (group.members[2]) is itself a group (members [a])`},
		3: {ErrBroken, `group "zones": member "broken" (group.members[3]): connection file is invalid`},
	} {
		if i == 0 {
			continue
		}
		m, err := e.member(g, i)
		if m != nil || !errors.Is(err, tc.sentinel) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("member %d: %v, %v; want %v with %q", i, m, err, tc.sentinel, tc.want)
		}
	}
	// The missing member appears: the same cached group now resolves it.
	e.Write("missing", connB)
	m, err = e.member(g, 1)
	if err != nil || m.Config.CSI.Endpoint != "unix:///csi/b.sock" {
		t.Fatalf("member 1 after its file appeared: %v", err)
	}
	m.Release()
}

// TestGroupEviction: a group entry expires, is reloaded, and goes with its
// file like any other.
func TestGroupEviction(t *testing.T) {
	e := newEnv(t, time.Minute)
	e.Write("zones", "driver: group\ngroup:\n  members: [a]\n")
	e.get("zones")
	if n := e.store.Cached(); n != 1 {
		t.Fatalf("cached %d, want 1", n)
	}
	e.clock.Step(2 * time.Minute)
	if n := e.store.Cached(); n != 0 {
		t.Errorf("cached %d after the timeout, want 0", n)
	}
	n := e.loadCount()
	e.get("zones")
	if e.loadCount() != n+1 {
		t.Errorf("an expired group was not loaded again (%d loads, want %d)", e.loadCount(), n+1)
	}
	if err := os.Remove(e.Path("zones")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Get(context.Background(), "zones"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after the file went: %v, want ErrNotFound", err)
	}
}
