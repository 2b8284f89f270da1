package connection

import (
	"fmt"

	"github.com/democratic-csi/proxy-topology/pkg/config"
)

// IsGroup reports a connection of driver: group (SPEC §11): it has no
// upstream of its own, only Members.
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
// quiet logs nothing (a Look).
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
		return nil, Broken(name, fmt.Errorf("file %s: group.members[%d]: the group %q lists itself; members must be ordinary connections", file, i, name))
	}
	c := &Connection{Name: name, File: file, Config: &config.Connection{Driver: config.DriverGroup}, Group: g}
	c.refs.Store(1) // the caller's
	return c, nil
}

// Member finds member i of group g with get (the registry's Get for the
// server, Inspect for the dry run), so both say the same: a member that
// has no file, does not load, or is itself a group is an error of the
// group naming the member. The error wraps get's sentinel (ErrNotFound,
// ErrBroken, ErrUnavailable), so callers map it as they map Get's; the
// member comes with the reference get gave.
func Member[C interface {
	IsGroup() bool
	Members() []string
	Release()
}](g *Connection, i int, get func(name string) (C, error)) (C, error) {
	var none C
	name := g.Members()[i]
	m, err := get(name)
	if err != nil {
		return none, fmt.Errorf("group %q: member %q (group.members[%d]): %w", g.Name, name, i, err)
	}
	if m.IsGroup() {
		m.Release()
		return none, fmt.Errorf("%w: group %q: member %q (group.members[%d]) is itself a group (members %v); a group's members must be ordinary connections",
			ErrBroken, g.Name, name, i, m.Members())
	}
	return m, nil
}
