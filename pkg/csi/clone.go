package csi

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// shallowCopy returns a new message whose fields are those of m: scalars
// copied, and maps, lists and sub-messages shared with m. Handlers use it
// to build the outbound request without mutating the inbound one, as long
// as they only assign top-level fields of the copy (out.VolumeId = …,
// out.Secrets = merge(…)) and never write into a shared map, list or
// sub-message.
//
// proto.Clone makes a deep copy: for a CreateVolumeRequest about 7 µs and
// 32 allocations on every call (5% of the proxy's CPU in the benchmark
// profile, see docs/performance.md), for sub-messages the proxy never
// changes; this costs about 1 µs and 6 allocations. Copying through
// protoreflect keeps fields added by later CSI spec versions, which a
// hand-written field list would silently drop.
func shallowCopy[M proto.Message](m M) M {
	src := m.ProtoReflect()
	dst := src.New()
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		dst.Set(fd, v)
		return true
	})
	if u := src.GetUnknown(); len(u) > 0 {
		dst.SetUnknown(u)
	}
	return dst.Interface().(M)
}
