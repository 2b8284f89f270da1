package csi

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// wireTable is what wireValid needs of a message type, taken from its
// descriptor once: per field number, the kind of value and, for a
// sub-message, its table. Walking protoreflect descriptors on every call
// (an interface call and a lookup per field) was most of wireValid's cost.
type wireTable struct {
	fields []wireField // indexed by field number; kind 0: no such field
}

type wireField struct {
	kind wireKind
	sub  *wireTable
}

type wireKind uint8

const (
	kindUnknown wireKind = iota
	kindMessage
	kindString
	kindBytes
	kindVarint
	kindFixed32
	kindFixed64
)

// maxTableField bounds the field numbers a table holds; a message with a
// higher one (none of the CSI messages the fast path reads) is never
// wireValid and goes to the typed path.
const maxTableField = 64

// wireTableOf builds the table of md and of every message it contains.
func wireTableOf(md protoreflect.MessageDescriptor) *wireTable {
	return buildWireTable(md, map[protoreflect.FullName]*wireTable{})
}

func buildWireTable(md protoreflect.MessageDescriptor, memo map[protoreflect.FullName]*wireTable) *wireTable {
	if t, ok := memo[md.FullName()]; ok {
		return t // recursive types share their table
	}
	t := &wireTable{}
	memo[md.FullName()] = t
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		num := int(fd.Number())
		if num >= maxTableField {
			continue // unknown to the table: such a message takes the typed path
		}
		var f wireField
		switch fd.Kind() {
		case protoreflect.MessageKind:
			f = wireField{kind: kindMessage, sub: buildWireTable(fd.Message(), memo)}
		case protoreflect.StringKind:
			f.kind = kindString
		case protoreflect.BytesKind:
			f.kind = kindBytes
		case protoreflect.BoolKind, protoreflect.EnumKind, protoreflect.Int32Kind, protoreflect.Sint32Kind,
			protoreflect.Uint32Kind, protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Uint64Kind:
			f.kind = kindVarint
		case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
			f.kind = kindFixed32
		case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
			f.kind = kindFixed64
		default: // groups
			continue
		}
		for len(t.fields) <= num {
			t.fields = append(t.fields, wireField{})
		}
		t.fields[num] = f
	}
	return t
}

// wireValid reports whether b is a message of t's type that protobuf-go
// decodes without error and without unknown fields: every field known and
// of its wire type, strings valid UTF-8, sub-messages and map entries
// likewise. false only means "not for the fast path"; the typed path
// decides what b really is.
func wireValid(b []byte, t *wireTable, depth int) bool {
	if depth > 32 {
		return false
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || int(num) >= len(t.fields) {
			return false
		}
		b = b[n:]
		f := t.fields[num]
		switch f.kind {
		case kindMessage, kindString, kindBytes:
			v, n := protowire.ConsumeBytes(b)
			if typ != protowire.BytesType || n < 0 {
				return false
			}
			switch {
			case f.kind == kindMessage && !wireValid(v, f.sub, depth+1):
				return false
			case f.kind == kindString && !utf8.Valid(v):
				return false
			}
			b = b[n:]
		case kindVarint:
			_, n := protowire.ConsumeVarint(b)
			if typ != protowire.VarintType || n < 0 {
				return false
			}
			b = b[n:]
		case kindFixed32:
			_, n := protowire.ConsumeFixed32(b)
			if typ != protowire.Fixed32Type || n < 0 {
				return false
			}
			b = b[n:]
		case kindFixed64:
			_, n := protowire.ConsumeFixed64(b)
			if typ != protowire.Fixed64Type || n < 0 {
				return false
			}
			b = b[n:]
		default:
			return false
		}
	}
	return true
}
