package testupstream

import (
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Real drivers hand out long IDs: ceph-csi's volume handles carry a
// version, the cluster id, the pool id and a UUID, and democratic-csi's
// filecopy snapshot IDs ("snapshot_driver=filecopy&snapshot_id=<volume
// id>-<snapshot name>") are 123 bytes for Kubernetes names. A profile with
// IDLength pads local-hostpath's own IDs ("vol-" or "snap-" and 32 hex
// digits, a volume's followed by "-" and its base path's 8-digit
// fingerprint) in front, ceph-csi style, to exactly that length:
//
//	0001-0024-6d2a6c5e-…-0000000000000002_vol-0123…
//
// and takes the padding off every ID it is sent. An ID without the padding
// is passed on as it is, so an ID this driver never made stays unknown.

// idPad is cut to length; it contains no '_', so the last '_' of a long ID
// separates the padding from local-hostpath's ID.
const idPad = "0001-0024-6d2a6c5e-5d6b-4b8e-9a3f-7f3c1e0b9d21-0000000000000002-" +
	"8c1f0a7e-2b4d-4c6a-9e8f-1a2b3c4d5e6f-0000000000000000000000000000000000000000"

// minIDLength is the shortest IDLength that still fits a local-hostpath
// snapshot ID ("snap-" and 32 hex digits) after a separator.
const minIDLength = 5 + 32 + 1 + 1

// idFields are the string fields that hold volume or snapshot IDs in CSI
// messages, at any depth (content sources, list entries, health entries).
var idFields = map[protoreflect.Name]bool{"volume_id": true, "snapshot_id": true, "source_volume_id": true}

type longIDs struct{ length int }

// pad turns a local-hostpath ID into a long one.
func (l longIDs) pad(id string) string {
	n := l.length - len(id) - 1
	if id == "" || n < 0 || n > len(idPad) {
		return id
	}
	return idPad[:n] + "_" + id
}

// strip turns a long ID back into local-hostpath's; anything else is
// returned unchanged.
func (l longIDs) strip(id string) string {
	i := strings.LastIndexByte(id, '_')
	if len(id) != l.length || i < 0 || id[:i] != idPad[:i] {
		return id
	}
	return id[i+1:]
}

// inbound returns a copy of the request with long IDs stripped.
func (l longIDs) inbound(req any) any {
	m, ok := req.(proto.Message)
	if l.length == 0 || !ok {
		return req
	}
	m = proto.Clone(m)
	walkIDs(m.ProtoReflect(), l.strip)
	return m
}

// outbound pads the IDs of an answer in place.
func (l longIDs) outbound(resp any) any {
	if m, ok := resp.(proto.Message); ok && l.length > 0 {
		walkIDs(m.ProtoReflect(), l.pad)
	}
	return resp
}

// walkIDs applies f to every ID field of m and of the messages inside it.
func walkIDs(m protoreflect.Message, f func(string) string) {
	var set []protoreflect.FieldDescriptor // not set during Range
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			list := v.List()
			for i := 0; i < list.Len(); i++ {
				walkIDs(list.Get(i).Message(), f)
			}
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					walkIDs(mv.Message(), f)
					return true
				})
			}
		case fd.Message() != nil:
			walkIDs(v.Message(), f)
		case fd.Kind() == protoreflect.StringKind && !fd.IsList() && idFields[fd.Name()]:
			set = append(set, fd)
		}
		return true
	})
	for _, fd := range set {
		m.Set(fd, protoreflect.ValueOfString(f(m.Get(fd).String())))
	}
}
