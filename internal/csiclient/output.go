package csiclient

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// marshalJSON is protojson re-indented by encoding/json: protojson varies
// its whitespace on purpose, and output people diff should not.
func marshalJSON(m proto.Message) ([]byte, error) {
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// emit prints resp as protojson with -o json, else runs text.
func (c *client) emit(resp proto.Message, text func(w io.Writer)) error {
	if c.output == "json" {
		b, err := marshalJSON(resp)
		if err != nil {
			return err
		}
		fmt.Fprintln(c.stdout, string(b))
		return nil
	}
	text(c.stdout)
	return nil
}

// FormatTerms prints topology terms the way the proxy's own messages do:
// [{k=v, k=v} OR {k=v}], keys sorted; [] for none.
func FormatTerms(ts []*csi.Topology) string {
	if len(ts) == 0 {
		return "[]"
	}
	parts := make([]string, len(ts))
	for i, t := range ts {
		segs := t.GetSegments()
		kv := make([]string, 0, len(segs))
		for _, k := range slices.Sorted(maps.Keys(segs)) {
			kv = append(kv, k+"="+segs[k])
		}
		parts[i] = "{" + strings.Join(kv, ", ") + "}"
	}
	return "[" + strings.Join(parts, " OR ") + "]"
}

func formatMap(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

func topologyText(ts []*csi.Topology) string {
	if len(ts) == 0 {
		return "none (reachable from every node)"
	}
	return FormatTerms(ts)
}

func sizeText(b int64) string {
	if b == 0 {
		return "0 (not reported)"
	}
	return fmt.Sprintf("%s (%d bytes)", formatSize(b), b)
}

func enumList[E fmt.Stringer](xs []E) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = x.String()
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func printVolume(out io.Writer, v *csi.Volume) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "  capacity:\t%s\n", sizeText(v.GetCapacityBytes()))
	fmt.Fprintf(w, "  accessible_topology:\t%s\n", topologyText(v.GetAccessibleTopology()))
	if len(v.GetVolumeContext()) > 0 {
		fmt.Fprintf(w, "  volume_context:\t%s\n", formatMap(v.GetVolumeContext()))
	}
	if src := v.GetContentSource(); src != nil {
		switch {
		case src.GetSnapshot() != nil:
			fmt.Fprintf(w, "  source:\tsnapshot %s\n", src.GetSnapshot().GetSnapshotId())
		case src.GetVolume() != nil:
			fmt.Fprintf(w, "  source:\tvolume %s\n", src.GetVolume().GetVolumeId())
		}
	}
	w.Flush()
}
