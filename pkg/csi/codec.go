package csi

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the proto codec wireCodec defers to
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// rawMessage is a message kept as its wire bytes. The server codec fills
// it with a request's bytes, and sends it as it is; the same codec, as a
// per-call option, sends one to an upstream and receives the answer into
// one. newMsg, when set, says what the bytes are, for debug logging.
type rawMessage struct {
	b      []byte
	newMsg func() proto.Message
}

// decoded returns the message the bytes encode, for logging; a message
// that does not decode is logged empty.
func (r *rawMessage) decoded() proto.Message {
	if r.newMsg == nil {
		return nil
	}
	m := r.newMsg()
	_ = proto.Unmarshal(r.b, m)
	return m
}

// wireCodec is gRPC's proto codec for every message except *rawMessage,
// whose bytes it passes through untouched.
type wireCodec struct{ proto encoding.CodecV2 }

func (c wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*rawMessage); ok {
		return mem.BufferSlice{mem.SliceBuffer(r.b)}, nil
	}
	return c.proto.Marshal(v)
}

func (c wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*rawMessage); ok {
		r.b = data.Materialize()
		return nil
	}
	return c.proto.Unmarshal(data, v)
}

// Name is "proto": on the wire nothing changes.
func (wireCodec) Name() string { return "proto" }

var codec = wireCodec{proto: encoding.GetCodecV2("proto")}

// rawCall makes an upstream call send and receive *rawMessage.
var rawCall = grpc.ForceCodecV2(codec)

// ServerCodec is the server option the wire-level fast path needs
// (RegisterFastPath): the proto codec, except that the two fast methods
// receive their requests as bytes. Every other message is coded by proto as
// before.
func ServerCodec() grpc.ServerOption { return grpc.ForceServerCodecV2(codec) }
