package connection

import (
	"context"
	"fmt"

	"github.com/democratic-csi/proxy-topology/pkg/config"
)

// IsGroup reports a connection of driver: group (SPEC §11): it has no
// upstream of its own (Controller and Node are nil), only Members.
func (c *Connection) IsGroup() bool { return c.Group != nil }

// Members returns a group's member names in order; nil for an ordinary
// connection.
func (c *Connection) Members() []string {
	if c.Group == nil {
		return nil
	}
	return c.Group.Group.Members
}

// loadGroup makes the Connection of a group file parsed as g. Only what
// the file alone says is checked (its syntax and member names by
// config.ParseFile, here that it does not list itself): members can be added, changed or removed at any time, so
// whether each one exists and is an ordinary connection is checked on
// every call (Member), and a group is never cached as broken because a
// member was.
// quiet logs nothing (a Survey's look).
func (s *Store) loadGroup(name, file string, g *config.Group, quiet bool) (*Connection, error) {
	c, err := newGroup(name, file, g)
	if quiet {
		return c, err
	}
	if err != nil {
		s.opts.Log.Error("connection file is invalid", "connection", name, "error", err)
		return nil, err
	}
	s.opts.Log.Debug("connection loaded", "connection", name, "driver", config.DriverGroup, "members", c.Members())
	return c, nil
}

// newGroup is loadGroup without the log: the Connection of the group file
// parsed as g, with the caller's reference, or an ErrBroken naming the
// connection.
func newGroup(name, file string, g *config.Group) (*Connection, error) {
	if i := g.SelfMember(name); i >= 0 {
		return nil, broken(name, fmt.Errorf("file %s: group.members[%d]: the group %q lists itself; members must be ordinary connections", file, i, name))
	}
	c := &Connection{Name: name, File: file, Config: &config.Connection{Driver: config.DriverGroup}, Group: g}
	c.refs.Store(1) // the caller's
	return c, nil
}

// Member returns member i of group g, with a reference the caller must
// Release. A member that has no file, does not load, or is itself a group
// is an error of the group naming the member; it wraps the store's
// sentinel (ErrNotFound, ErrBroken, ErrUnavailable), so callers map it as
// they map Get's errors.
func (s *Store) Member(ctx context.Context, g *Connection, i int) (*Connection, error) {
	return member(g, i, func(name string) (*Connection, error) { return s.Get(ctx, name) })
}

// member is Member with get to find a connection by name (Store.Get for
// the server, Inspect for the dry run), so both say the same.
func member(g *Connection, i int, get func(name string) (*Connection, error)) (*Connection, error) {
	name := g.Members()[i]
	m, err := get(name)
	if err != nil {
		return nil, fmt.Errorf("group %q: member %q (group.members[%d]): %w", g.Name, name, i, err)
	}
	if m.IsGroup() {
		m.Release()
		return nil, fmt.Errorf("%w: group %q: member %q (group.members[%d]) is itself a group (members %v); a group's members must be ordinary connections",
			ErrBroken, g.Name, name, i, m.Members())
	}
	return m, nil
}
