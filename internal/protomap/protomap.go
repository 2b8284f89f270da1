// Package protomap reads and writes protobuf map<string,string> fields in
// encoded messages without decoding them: the proxy's wire-level fast path
// (pkg/csi) and wire-encoded topology terms (pkg/accessible) both need it.
//
// Readers follow protobuf-go's decoding into a Go map: a missing key or
// value is empty, and of entries with the same key the last one counts.
// They never panic: malformed bytes end the scan with what was read.
package protomap

import "google.golang.org/protobuf/encoding/protowire"

// next splits off b's first field. ok is false at the end or on malformed
// bytes; value is set for length-delimited fields only.
func next(b []byte) (num protowire.Number, value, rest []byte, ok bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, nil, nil, false
	}
	b = b[n:]
	if typ == protowire.BytesType {
		value, n = protowire.ConsumeBytes(b)
	} else {
		n = protowire.ConsumeFieldValue(num, typ, b)
	}
	if n < 0 {
		return 0, nil, nil, false
	}
	return num, value, b[n:], true
}

// Entry returns the key and value of an encoded map entry.
func Entry(b []byte) (key, value []byte) {
	for len(b) > 0 {
		num, v, rest, ok := next(b)
		if !ok {
			break
		}
		switch num {
		case 1:
			key = v
		case 2:
			value = v
		}
		b = rest
	}
	return key, value
}

// Lookup returns the value of key in map field num of the encoded message
// b, and whether the key is there.
func Lookup(b []byte, num protowire.Number, key string) (value []byte, found bool) {
	for len(b) > 0 {
		n, v, rest, ok := next(b)
		if !ok {
			break
		}
		if n == num {
			if k, val := Entry(v); string(k) == key {
				value, found = val, true
			}
		}
		b = rest
	}
	return value, found
}

// AppendEntry appends the entry k: v of map field num to b.
func AppendEntry(b []byte, num protowire.Number, k, v string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(2+protowire.SizeBytes(len(k))+protowire.SizeBytes(len(v))))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, k)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendString(b, v)
}
