package connection

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/config"
	"github.com/democratic-csi/proxy-topology/pkg/ids"
)

// Inspect reads connection name from src and validates it as Get does,
// without caching it: the Connection has Name, File and Config (and Group
// for a group file), and no attachment. Its errors
// wrap Get's sentinels (ErrInvalidName, ErrNotFound, ErrBroken), so a
// caller maps them as it maps Get's. The topology dry run predicts a
// CreateVolume with it, touching neither an upstream's socket nor a
// built-in driver's base path. Nothing is cached; Release is harmless.
func Inspect(src Source, name string, opts accessible.Options) (*Connection, error) {
	if err := ids.ValidateConnectionName(name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidName, err)
	}
	file := src.Describe(name)
	data, err := src.Read(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, noFile(name, file)
	case err != nil:
		return nil, Broken(name, err)
	}
	f, err := config.ParseFile(file, data, opts)
	switch {
	case err != nil:
		return nil, Broken(name, err)
	case f.Group != nil:
		return newGroup(name, file, f.Group)
	}
	c := &Connection{Name: name, File: file, Config: f.Connection}
	c.refs.Store(1)
	return c, nil
}

// InspectMember is Member for Inspect: member i of group g, read from src
// without an upstream client, or the error Member would return.
func InspectMember(src Source, g *Connection, i int, opts accessible.Options) (*Connection, error) {
	return Member(g, i, func(name string) (*Connection, error) { return Inspect(src, name, opts) })
}
