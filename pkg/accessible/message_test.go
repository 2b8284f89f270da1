package accessible

import (
	"fmt"
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/status"
)

// TestNotAccessibleMessageIsBounded: however big the request, the refusal
// shows a few terms, a few segments each, and cuts keys and values at the
// CSI string limit, saying how long they were.
func TestNotAccessibleMessageIsBounded(t *testing.T) {
	long := strings.Repeat("v", 256<<10)
	many := map[string]string{}
	for i := range 5000 {
		many[pk("k"+strings.Repeat("x", i%200))+string(rune('a'+i%26))] = long[:i%300]
	}
	many[pk("zone")] = "z9"
	var terms []*csi.Topology
	for range 3000 {
		terms = append(terms, &csi.Topology{Segments: many})
	}
	tests := []struct {
		name string
		req  *csi.TopologyRequirement
		want []string
	}{
		{"long value", &csi.TopologyRequirement{Requisite: topos(topo(pk("zone"), long))},
			[]string{"{" + pk("zone") + "=" + long[:maxShownBytes] + "…(262144 bytes)}", "(requisite) is not accessible"}},
		{"long key", &csi.TopologyRequirement{Requisite: topos(topo(pk("zone"), "z9", "a/"+long, "x"))},
			[]string{"a/" + long[:maxShownBytes-2] + "…(262146 bytes)=x"}},
		{"long value in UTF-8", &csi.TopologyRequirement{Requisite: topos(topo(pk("zone"), "é"+strings.Repeat("é", 200)))},
			[]string{"=" + strings.Repeat("é", 64) + "…(402 bytes)}"}},
		{"thousands of big terms", &csi.TopologyRequirement{Requisite: terms}, []string{"… and 2995 more]", fmt.Sprintf("… and %d more}", len(many)-maxShownSegments)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decide("c1", tt.req, []Entry{zoneEntry("z1")}, zoneOpts)
			msg := status.Convert(err).Message()
			if len(msg) > 8<<10 {
				t.Errorf("message is %d bytes", len(msg))
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %.300q… does not contain %.300q", msg, w)
				}
			}
		})
	}
}
