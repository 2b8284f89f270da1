package csi

import (
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/google/go-cmp/cmp"
)

// populate sets every field of m, recursively down to depth levels of
// sub-messages, so a copy that drops any field is caught.
func populate(m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.ContainingOneof() != nil && m.WhichOneof(fd.ContainingOneof()) != nil {
			continue // one member of each oneof
		}
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			mp.Set(scalar(fd.MapKey()).MapKey(), value(m, fd.MapValue(), mp.NewValue, depth))
		case fd.IsList():
			l := m.Mutable(fd).List()
			l.Append(value(m, fd, l.NewElement, depth))
		case fd.Message() != nil:
			if depth > 0 {
				populate(m.Mutable(fd).Message(), depth-1)
			}
		default:
			m.Set(fd, scalar(fd))
		}
	}
}

func value(m protoreflect.Message, fd protoreflect.FieldDescriptor, newValue func() protoreflect.Value, depth int) protoreflect.Value {
	if fd.Message() == nil {
		return scalar(fd)
	}
	v := newValue()
	if depth > 0 {
		populate(v.Message(), depth-1)
	}
	return v
}

func scalar(fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(fd.Enum().Values().Get(fd.Enum().Values().Len() - 1).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(7)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(7)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(7)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(7)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(7)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(7)
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte("b"))
	}
	return protoreflect.ValueOfString("s-" + string(fd.Name()))
}

// Every CSI request, with every field set (and an unknown field, as from a
// newer CO), comes out of outbound equal to what went in: nothing the CO
// sent is lost on the way upstream, including fields of spec versions this
// proxy does not know yet.
func TestOutboundKeepsEveryField(t *testing.T) {
	msgs := csi.File_csi_proto.Messages()
	n := 0
	for i := 0; i < msgs.Len(); i++ {
		md := msgs.Get(i)
		if !strings.HasSuffix(string(md.Name()), "Request") {
			continue
		}
		mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
		if err != nil {
			t.Fatal(err)
		}
		n++
		t.Run(string(md.Name()), func(t *testing.T) {
			in := mt.New()
			populate(in, 3)
			in.SetUnknown(protoreflect.RawFields{0xf8, 0x07, 0x01}) // field 127, varint 1
			want := proto.Clone(in.Interface())
			got := outbound(in.Interface())
			if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
				t.Errorf("outbound differs (-want +got):\n%s", d)
			}
			if string(got.ProtoReflect().GetUnknown()) != string(want.ProtoReflect().GetUnknown()) {
				t.Errorf("unknown fields lost")
			}
		})
	}
	if n < 20 {
		t.Fatalf("found only %d request messages", n)
	}
}

// What the handlers do to the copy (assign top-level fields) never shows
// in the inbound request.
func TestOutboundLeavesInboundAlone(t *testing.T) {
	in := &csi.CreateVolumeRequest{
		Name:       "pvc-1",
		Parameters: map[string]string{ConnectionParameter: "c1", "fsType": "ext4"},
		Secrets:    map[string]string{"user": "u"},
		AccessibilityRequirements: &csi.TopologyRequirement{
			Requisite: []*csi.Topology{{Segments: map[string]string{"p/zone": "z1"}}},
		},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
			Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: "v:c1/src"}}},
	}
	want := proto.Clone(in)
	out := outbound(in)
	out.Name = "other"
	out.Parameters = merge(nil, in.GetParameters())
	out.Secrets = nil
	out.AccessibilityRequirements = nil
	out.VolumeContentSource = &csi.VolumeContentSource{}
	if d := cmp.Diff(want, in, protocmp.Transform()); d != "" {
		t.Errorf("inbound request changed (-want +got):\n%s", d)
	}
}

func BenchmarkShallowCopyCreateVolume(b *testing.B) {
	req := &csi.CreateVolumeRequest{
		Name:          "pvc-2f0c6a7e-8d1b-4c55-9e0a-5b3c1d7f9a42",
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}},
		Parameters: map[string]string{ConnectionParameter: "c1", "csi.storage.k8s.io/pvc/name": "data-0",
			"csi.storage.k8s.io/pvc/namespace": "default", "csi.storage.k8s.io/pv/name": "pvc-2f0c"},
		AccessibilityRequirements: &csi.TopologyRequirement{
			Requisite: []*csi.Topology{{Segments: map[string]string{"p/zone": "z1"}}},
			Preferred: []*csi.Topology{{Segments: map[string]string{"p/zone": "z1"}}},
		},
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = outbound(req)
	}
}
