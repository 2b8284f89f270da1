package config

import (
	"errors"
	"fmt"
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/democratic-csi/proxy-topology/pkg/ids"
)

// DriverGroup is a connection file without a backend of its own: a
// CreateVolume on it goes to one of its members (SPEC §11).
const DriverGroup = "group"

// Group is a connection file of driver: group.
//
// A group is decoded apart from Connection: it shares no key with the
// other drivers (no endpoint, no base path, no topology of its own: its
// members' topology decides where a volume goes), so a file that mixes
// them is refused rather than half applied.
type Group struct {
	Driver string       `koanf:"driver"`
	Group  GroupMembers `koanf:"group"`
}

// GroupMembers is the group: section.
type GroupMembers struct {
	// Members are names of ordinary connections, in the order a
	// CreateVolume tries them: for each of the request's terms, the first
	// member whose topology admits it is chosen.
	Members []string `koanf:"members"`
}

// IsGroupFile reports whether data is a connection file that says
// driver: group. A file that does not decode is not a group; the ordinary
// parser reports what is wrong with it.
func IsGroupFile(data []byte) bool {
	doc, _, err := decodeDocument("", data)
	return err == nil && driverOf(doc) == DriverGroup
}

// ParseGroup decodes and validates a group file. file is used in
// messages only. Whether the members exist, load and are not groups
// themselves is not known here: members can come and go at run time, so
// the proxy checks them on every call (pkg/connection) and `check` checks
// the folder. A file that decodes but does not validate returns its Group
// with the error, so that `check` can go on to report the problems of
// every member at once; the proxy uses no Group that came with an error.
func ParseGroup(file string, data []byte) (*Group, error) {
	doc, dec, err := decodeDocument(file, data)
	if err != nil {
		return nil, err
	}
	return parseGroup(file, doc, dec)
}

// parseGroup is ParseGroup of the file's first document, already decoded
// by dec (decodeDocument). Every key of another driver (csi,
// local-hostpath, proxy.perDriver) is refused, not warned about: it would
// be ignored, and a topology written on a group would look like it
// restricts the group while the members' topology decides.
func parseGroup(file string, doc *yaml.Node, dec *yaml.Decoder) (*Group, error) {
	var g Group
	d := decodeNode(doc, &g, decodeRules{})
	var unknown []error
	for _, u := range d.unknown {
		if u.parent == "" {
			unknown = append(unknown, fmt.Errorf("%s: not a key of a group file (driver: group has only group.members; a member's own file holds its endpoint and topology)", u.key))
		} else {
			unknown = append(unknown, fmt.Errorf("%s.%s: unknown key (a group has only group.members)", u.parent, showKey(u.key)))
		}
	}
	if err := firstErrors(d.shapeErrors(nil), unknown, d.yamlErrors()); err != nil {
		return nil, fmt.Errorf("file %s: %w", file, err)
	}
	if err := noSecondDocument(file, dec); err != nil {
		return nil, err
	}
	if err := g.Validate(); err != nil {
		return &g, fmt.Errorf("file %s: %w", file, err)
	}
	return &g, nil
}

// Validate checks what the file alone can tell; errors name the key path.
func (g *Group) Validate() error {
	var errs []error
	if g.Driver != DriverGroup {
		errs = append(errs, fmt.Errorf("driver: %q is not group", g.Driver))
	}
	if len(g.Group.Members) == 0 {
		errs = append(errs, errors.New("group.members: required: the names of the connections the group chooses among"))
	}
	seen := map[string]int{}
	for i, m := range g.Group.Members {
		key := fmt.Sprintf("group.members[%d]", i)
		if err := ids.ValidateConnectionName(m); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", key, err))
			continue
		}
		if j, dup := seen[m]; dup {
			errs = append(errs, fmt.Errorf("%s: %q is already group.members[%d]", key, m, j))
			continue
		}
		seen[m] = i
	}
	return errors.Join(errs...)
}

// SelfMember returns the index of name among the members, or -1. A group
// that lists itself is refused by the store, which knows its name.
func (g *Group) SelfMember(name string) int {
	return slices.Index(g.Group.Members, name)
}
