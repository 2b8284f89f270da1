package protomap

import (
	"fmt"
	"math/rand/v2"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Lookup and AppendEntry agree with protobuf-go on a map field: entries
// written by AppendEntry decode to the same map, and Lookup finds what the
// decoded map holds, repeated keys (last wins) and other fields included.
func TestAgreesWithProtobuf(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		var b []byte
		for j := r.IntN(6); j > 0; j-- {
			switch r.IntN(4) {
			case 0: // a field that is not the map
				b = protowire.AppendTag(b, 9, protowire.VarintType)
				b = protowire.AppendVarint(b, uint64(r.IntN(1000)))
			default:
				b = AppendEntry(b, 1, fmt.Sprintf("k%d", r.IntN(3)), fmt.Sprintf("v%d", r.IntN(3)))
			}
		}
		// Field 9 is unknown to csi.Topology, whose field 1 is the
		// segments map: the decoded map is what Lookup must find.
		want := &csi.Topology{}
		if err := proto.Unmarshal(b, want); err != nil {
			t.Fatalf("%x: %v", b, err)
		}
		for _, k := range []string{"k0", "k1", "k2", "k3"} {
			v, ok := Lookup(b, 1, k)
			wv, wok := want.GetSegments()[k]
			if ok != wok || string(v) != wv {
				t.Fatalf("%x: Lookup(%q) = %q, %v; protobuf-go: %q, %v", b, k, v, ok, wv, wok)
			}
		}
	}
}

func TestEntryMissingAndRepeated(t *testing.T) {
	var e []byte
	e = protowire.AppendTag(e, 2, protowire.BytesType)
	e = protowire.AppendString(e, "v1")
	e = protowire.AppendTag(e, 2, protowire.BytesType)
	e = protowire.AppendString(e, "v2")
	if k, v := Entry(e); len(k) != 0 || string(v) != "v2" {
		t.Fatalf("Entry = %q, %q; want a missing key and the last value", k, v)
	}
}

// Malformed bytes end the scan; nothing panics.
func FuzzLookup(f *testing.F) {
	f.Add(AppendEntry(nil, 1, "k", "v"), "k")
	f.Add([]byte{0x0a, 0xff}, "k")
	f.Fuzz(func(t *testing.T, b []byte, key string) {
		Lookup(b, 1, key)
		Entry(b)
	})
}
