// Package rawproxy is a generic gRPC forwarder with no logic at all: every
// method of every service is relayed as opaque bytes to one upstream. It is
// the floor of the benchmark — the cost of one extra gRPC hop that any
// proxy, however clever, has to pay.
package rawproxy

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Codec passes *[]byte through untouched: no protobuf decoding on either
// side of the forwarder.
type Codec struct{}

// Name is the content subtype; "proto" so the wire format is what any CSI
// client and server speak.
func (Codec) Name() string { return "proto" }

// Marshal returns the bytes v points to.
func (Codec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("rawproxy: cannot marshal %T", v)
	}
	return *b, nil
}

// Unmarshal keeps data; gRPC hands the codec a fresh slice it does not
// reuse.
func (Codec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawproxy: cannot unmarshal into %T", v)
	}
	*b = data
	return nil
}

// New returns a server that relays every unary call to upstream (a gRPC
// target such as unix:///path) and the client connection it uses; the
// caller closes both. opts are added to the server's options.
func New(upstream string, opts ...grpc.ServerOption) (*grpc.Server, *grpc.ClientConn, error) {
	cc, err := grpc.NewClient(upstream, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	srv := grpc.NewServer(append(opts,
		grpc.ForceServerCodec(Codec{}),
		grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
			method, ok := grpc.MethodFromServerStream(ss)
			if !ok {
				return status.Error(codes.Internal, "rawproxy: no method in stream")
			}
			var in, out []byte
			if err := ss.RecvMsg(&in); err != nil {
				return err
			}
			if err := cc.Invoke(ss.Context(), method, &in, &out, grpc.ForceCodec(Codec{})); err != nil {
				return err
			}
			return ss.SendMsg(&out)
		}),
	)...)
	return srv, cc, nil
}
