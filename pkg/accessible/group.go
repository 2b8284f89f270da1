package accessible

import (
	"strconv"
	"strings"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Term kinds a group's choice can rest on.
const (
	KindPreferred = "preferred"
	KindRequisite = "requisite"
)

// Choice is the member a group's CreateVolume goes to (SPEC §11), and the
// term that decided it.
type Choice struct {
	// Member is the index in the group's members.
	Member int
	// Kind is KindPreferred or KindRequisite, or "" when the request had
	// no requirements (then the first member is chosen).
	Kind string
	// Term is the index of the deciding term in its list.
	Term int
	// Declined are the members tried for the deciding term before Member,
	// each of which does not admit it (in members order).
	Declined []int
}

// Choose picks a group's member for a CreateVolume: for each preferred
// term in order, then each requisite term, the first member (in members
// order) whose topology admits that term; with no requirements the first
// member. It is a pure function of the request and the members' topology,
// so a retried CreateVolume reaches the same member.
//
// admits reports whether member i admits a term (Compiled.Admits for a
// member with a topology list); Choose asks only about the members it
// needs, in order, and stops at the first error (a member that cannot be
// loaded cannot be skipped: the choice would then depend on whether it
// loads). ok is false when no member admits any term; the caller then
// reports NoMemberError.
func Choose(n int, admits func(i int, term *csi.Topology) (bool, error), requisite, preferred []*csi.Topology) (ch Choice, ok bool, err error) {
	if n == 0 {
		return Choice{Member: -1}, false, nil
	}
	if len(requisite) == 0 && len(preferred) == 0 {
		return Choice{}, true, nil
	}
	for _, list := range []struct {
		kind  string
		terms []*csi.Topology
	}{{KindPreferred, preferred}, {KindRequisite, requisite}} {
		for j, term := range list.terms {
			var declined []int
			for i := range n {
				ok, err := admits(i, term)
				if err != nil {
					return Choice{Member: -1}, false, err
				}
				if ok {
					return Choice{Member: i, Kind: list.kind, Term: j, Declined: declined}, true, nil
				}
				declined = append(declined, i)
			}
		}
	}
	return Choice{Member: -1}, false, nil
}

// Explain says in words why ch was chosen, for the dry run and debug logs:
// "preferred term 0 {zone=zone2}: member "z1" does not admit it, member
// "z2" does".
func (ch Choice) Explain(names []string, requisite, preferred []*csi.Topology) string {
	if ch.Member < 0 || ch.Member >= len(names) {
		return "no member admits any term"
	}
	if ch.Kind == "" {
		return "no requirements: the first member, " + strconv.Quote(names[ch.Member])
	}
	terms := preferred
	if ch.Kind == KindRequisite {
		terms = requisite
	}
	var sb strings.Builder
	sb.WriteString(ch.Kind + " term " + strconv.Itoa(ch.Term) + " ")
	if ch.Term < len(terms) {
		writeSegments(&sb, termSegments(terms[ch.Term]))
	}
	if ch.Kind == KindRequisite && len(preferred) > 0 {
		sb.WriteString(" (no member admits any preferred term)")
	}
	sb.WriteString(": ")
	for _, i := range ch.Declined {
		sb.WriteString("member " + strconv.Quote(names[i]) + " does not admit it, ")
	}
	sb.WriteString("member " + strconv.Quote(names[ch.Member]) + " does")
	return sb.String()
}

// Offers describes what a connection's topology offers, as the refusal
// messages show it: "[{k=v}, …]", or "every node" for an empty list.
func (c *Compiled) Offers() string {
	if len(c.entries) == 0 {
		return "every node"
	}
	var sb strings.Builder
	writeList(&sb, len(c.norm), func(i int) []segment { return c.norm[i] })
	return sb.String()
}

// NoMemberError is the RESOURCE_EXHAUSTED a group returns when none of its
// members admits any term of the request: what was asked, and each member
// with what it offers (offers[i], e.g. Compiled.Offers). RESOURCE_EXHAUSTED,
// as for one connection (SPEC §8), makes the external-provisioner hand a
// WaitForFirstConsumer claim back to the scheduler.
func NoMemberError(group string, names, offers []string, requisite, preferred []*csi.Topology) error {
	terms, kind := requisite, KindRequisite
	if len(terms) == 0 {
		terms, kind = preferred, KindPreferred
	}
	var sb strings.Builder
	writeAsked(&sb, kind, terms)
	sb.WriteString(" for any member of group " + strconv.Quote(group) + ": ")
	for i, name := range names {
		if i > 0 {
			sb.WriteString("; ")
		}
		sb.WriteString("member " + strconv.Quote(name) + " offers " + offers[i])
	}
	return status.Error(codes.ResourceExhausted, sb.String())
}
