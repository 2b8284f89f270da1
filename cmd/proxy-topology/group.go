package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/internal/csiclient"
	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/config"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
	"github.com/democratic-csi/proxy-topology/pkg/ids"
	"github.com/democratic-csi/proxy-topology/pkg/labels"
)

// Connection groups (SPEC §11) in `check` and in the topology dry run.

// checkGroupFile checks the group file at path (config.IsGroupFile of its
// content data): the file itself, and each member as the proxy would find
// it in folder on a call: present, an ordinary connection, loading. A
// member without topology admits every term, so the members after it are
// never chosen: a warning unless it is last. A member whose entry an
// earlier member also serves never gets claims for it: a warning says
// which member wins. A node-local member admits only its controller's
// node, so it is neither.
func checkGroupFile(path, name string, data []byte, folder string, opts accessible.Options) checkResult {
	r := checkResult{path: path}
	g, err := config.ParseGroup(shown(path), data)
	if err != nil {
		r.errors = flatten(err.Error(), "file "+shown(path)+": ")
		if g == nil {
			return r
		}
	}
	// Every member's problem is reported at once: an invalid name
	// (reported above) hides no member that is missing, a group, or the
	// group itself.
	if i := g.SelfMember(name); i >= 0 {
		r.errors = append(r.errors, fmt.Sprintf("group.members[%d]: the group %q lists itself; members must be ordinary connections", i, name))
	}
	members := g.Group.Members
	loaded := make([]*config.Connection, len(members))
	for i, m := range members {
		if m == name || ids.ValidateConnectionName(m) != nil || slices.Index(members, m) < i {
			continue
		}
		key := fmt.Sprintf("group.members[%d]", i)
		mpath := filepath.Join(folder, m+".yaml")
		mdata, err := config.ReadFile(mpath)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			r.errors = append(r.errors, fmt.Sprintf("%s: connection %q has no file %s: calls that need it fail until it exists", key, m, mpath))
			continue
		case err != nil:
			r.errors = append(r.errors, fmt.Sprintf("%s: %s: %s", key, m, unwrapPath(err)))
			continue
		case config.IsGroupFile(mdata):
			r.errors = append(r.errors, fmt.Sprintf("%s: %q is itself a group; a group's members must be ordinary connections", key, m))
			continue
		}
		c, _, err := config.ParseConnection(mpath, mdata, opts)
		if err != nil {
			r.errors = append(r.errors, fmt.Sprintf("%s: %q does not load (see %s)", key, m, mpath))
			continue
		}
		loaded[i] = c
	}
	slices.SortStableFunc(r.errors, func(a, b string) int { return memberIndex(a) - memberIndex(b) })
	for i, c := range loaded {
		if c == nil {
			continue
		}
		key := fmt.Sprintf("group.members[%d]", i)
		if connection.IsNodeLocal(c, opts) {
			// It admits only the node whose controller serves the
			// call (SPEC §12), so the members after it serve the rest.
			continue
		}
		if len(c.Proxy.PerDriver.Topology) == 0 {
			if i < len(members)-1 {
				r.warnings = append(r.warnings, fmt.Sprintf("%s: %q declares no topology, so it admits every claim: %s after it %s never chosen; put it last",
					key, members[i], quoteList(members[i+1:]), plural(len(members)-i-1, "is", "are")))
			}
			continue
		}
		for k, e := range c.Proxy.PerDriver.Topology {
			term := &csi.Topology{Segments: map[string]string{}}
			for rk, rv := range e.Requirements {
				term.Segments[labels.FullKey(opts.Prefix, rk)] = rv
			}
			for j := range i {
				// A member without topology before it has its own warning.
				if loaded[j] != nil && len(loaded[j].Proxy.PerDriver.Topology) > 0 && accessible.Compile(loaded[j].Proxy.PerDriver.Topology, opts).Admits(term) {
					r.warnings = append(r.warnings, fmt.Sprintf("%s: %q serves %s (its proxy.perDriver.topology[%d]), and so does %q (group.members[%d]), which comes first: claims for it go to %q",
						key, members[i], csiclient.FormatTerms([]*csi.Topology{term}), k, members[j], j, members[j]))
					break
				}
			}
		}
	}
	return r
}

func quoteList(names []string) string {
	out := ""
	for i, n := range names {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%q", n)
	}
	return out
}

// dryRunGroup is the dry run of a CreateVolume on group g: which member
// the request reaches and why, then that member's own decision. Members
// are read as the server reads them (connection.InspectMember) and chosen
// by the server's own code (pcsi.Placement.ChooseMember), so a node-local
// member admits only the dry run's node, as it does in the server.
func dryRunGroup(stdout io.Writer, src connection.Source, g *connection.Connection, req *csi.TopologyRequirement, answer []*csi.Topology, place pcsi.Placement, terms string, verdict error) error {
	fmt.Fprintf(stdout, "group %q (%s):\n%s", g.Name, shown(g.File), terms)
	names := g.Members()
	type asked struct {
		c   *connection.Connection
		err error
	}
	members := make([]*asked, len(names))
	m, why, err := pcsi.ChooseMember(place, g, req.GetRequisite(), req.GetPreferred(), func(i int) (*connection.Connection, error) {
		c, err := connection.InspectMember(src, g, i, place.Topology)
		members[i] = &asked{c: c, err: err}
		return c, err
	})
	for i, n := range names {
		switch a := members[i]; {
		case a == nil:
			fmt.Fprintf(stdout, "  member %d %q: not needed\n", i, n)
		case a.err != nil:
			msg := strings.TrimPrefix(a.err.Error(), fmt.Sprintf("group %q: member %q (group.members[%d]): ", g.Name, n, i))
			fmt.Fprintf(stdout, "  member %d %q: %s\n", i, n, msg)
		default:
			fmt.Fprintf(stdout, "  member %d %q (%s) offers %s\n", i, n, shown(a.c.File), place.Offers(a.c))
		}
	}
	if err != nil {
		return dryRunFailed(stdout, err)
	}
	fmt.Fprintf(stdout, "  member: %s\n", m.Name)
	fmt.Fprintf(stdout, "  why: %s\n", why)
	top, err := dryRunDecide(stdout, m, req, answer, place)
	if err != nil {
		return dryRunFailed(stdout, err)
	}
	fmt.Fprintf(stdout, "  CreateVolume: OK on member %q (volume ids v:%s/…)\n", m.Name, m.Name)
	printAccessible(stdout, top)
	return verdict
}

// dryRunFailed prints the status CreateVolume would fail with; the exit
// says "would fail" and the output says why.
func dryRunFailed(stdout io.Writer, err error) error {
	st := status.Convert(err)
	fmt.Fprintf(stdout, "  CreateVolume: %s: %s\n", st.Code(), st.Message())
	return &exitError{code: exitFailed}
}

// printAccessible prints a CreateVolume's accessible_topology.
func printAccessible(stdout io.Writer, top []*csi.Topology) {
	if top == nil {
		fmt.Fprintln(stdout, "  accessible_topology: none (reachable from every node)")
	} else {
		fmt.Fprintf(stdout, "  accessible_topology: %s\n", csiclient.FormatTerms(top))
	}
}

// nodeTerm is the requirement the external-provisioner sends in strict
// WaitForFirstConsumer mode when the scheduler picked this node: requisite
// = preferred = the node's segments.
func nodeTerm(segments map[string]string) *csi.TopologyRequirement {
	t := &csi.Topology{Segments: maps.Clone(segments)}
	return &csi.TopologyRequirement{Requisite: []*csi.Topology{t}, Preferred: []*csi.Topology{t}}
}

// memberIndex is N of an error about group.members[N], -1 for any other.
func memberIndex(msg string) int {
	var i int
	if _, err := fmt.Sscanf(msg, "group.members[%d]", &i); err != nil {
		return -1
	}
	return i
}
