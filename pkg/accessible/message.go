package accessible

import (
	"slices"
	"strconv"
	"strings"

	csi "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/democratic-csi/proxy-topology/pkg/clip"
)

// Limits on what an error message shows. A cluster with thousands of nodes
// sends one requisite term per node, and the message ends up in events and
// logs, so it shows a sample and counts the rest.
const (
	maxShownTopologies = 5
	maxShownSegments   = 8
	// maxShownBytes cuts a key or value at the CSI string limit: anything
	// longer is invalid as sent, and echoing a 256 KiB value would put it
	// into every log line and event about the claim.
	maxShownBytes = 128
)

// notAccessibleMessage explains a refusal: what was asked, as the CO sent it,
// and what the connection offers, as full-key requirements (extra labels do
// not take part in matching, so showing them would mislead).
func notAccessibleMessage(connection, kind string, terms []*csi.Topology, norm [][]segment) string {
	var sb strings.Builder
	writeAsked(&sb, kind, terms)
	sb.WriteString(" for connection ")
	sb.WriteString(strconv.Quote(connection))
	sb.WriteString(" (it offers ")
	writeList(&sb, len(norm), func(i int) []segment { return norm[i] })
	sb.WriteString(")")
	return sb.String()
}

// termSegments returns a term's segments sorted by key, for messages only.
func termSegments(t *csi.Topology) []segment {
	m := t.GetSegments()
	out := make([]segment, 0, len(m))
	for k, v := range m {
		out = append(out, segment{k, v})
	}
	slices.SortFunc(out, func(a, b segment) int { return strings.Compare(a.key, b.key) })
	return out
}

// writeList writes "[{…}, {…}, … and N more]"; get is only called for the
// items shown, so unshown terms cost nothing.
func writeList(sb *strings.Builder, n int, get func(int) []segment) {
	sb.WriteByte('[')
	for i := range min(n, maxShownTopologies) {
		if i > 0 {
			sb.WriteString(", ")
		}
		writeSegments(sb, get(i))
	}
	if n > maxShownTopologies {
		sb.WriteString(", … and ")
		sb.WriteString(strconv.Itoa(n - maxShownTopologies))
		sb.WriteString(" more")
	}
	sb.WriteByte(']')
}

// writeSegments writes "{k=v, k=v}" for segments sorted by key.
func writeSegments(sb *strings.Builder, segments []segment) {
	sb.WriteByte('{')
	for i, s := range segments {
		if i == maxShownSegments {
			sb.WriteString(", … and ")
			sb.WriteString(strconv.Itoa(len(segments) - maxShownSegments))
			sb.WriteString(" more")
			break
		}
		if i > 0 {
			sb.WriteString(", ")
		}
		writeShort(sb, s.key)
		sb.WriteByte('=')
		writeShort(sb, s.value)
	}
	sb.WriteByte('}')
}

// writeShort writes s, cut to maxShownBytes with "…(N bytes)" saying how
// long it was.
func writeShort(sb *strings.Builder, s string) {
	sb.WriteString(clip.String(s, maxShownBytes))
}

// writeAsked writes the first half of a refusal: what was asked, as the CO
// sent it ("topology {…} (requisite) is not accessible").
func writeAsked(sb *strings.Builder, kind string, terms []*csi.Topology) {
	if len(terms) == 1 {
		sb.WriteString("topology ")
		writeSegments(sb, termSegments(terms[0]))
		sb.WriteString(" (" + kind + ") is not accessible")
		return
	}
	sb.WriteString("none of the topologies ")
	writeList(sb, len(terms), func(i int) []segment { return termSegments(terms[i]) })
	sb.WriteString(" (" + kind + ") is accessible")
}
