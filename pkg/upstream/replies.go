package upstream

import (
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// MaxReplySize is the largest reply the proxy receives from an external
// upstream: 16 MiB, four times gRPC's default (4 MiB), which is also what
// the CO's own clients receive (csi-lib-utils and kubelet keep gRPC's
// default). A reply the CO cannot receive is useless to it, but the proxy
// must still read it: a CreateVolume or CreateSnapshot reply it reads
// names the object it made, which the proxy deletes when it cannot hand
// it back (pkg/csi, MaxReplyToCO). Past this limit the reply, and with it
// the object's ID, is lost (ReplyLost): a reply is held in memory whole
// while it is decoded, so the limit bounds what one upstream call can cost
// the proxy (docs/spec.md §10).
const MaxReplySize = 16 << 20

// ReplyLost reports whether err is this client's own failure to receive
// or decode an upstream's answer (over MaxReplySize, or not a valid
// message): the upstream answered, maybe after doing the work, and what it
// said is lost. gRPC gives such failures a status of its own making
// (RESOURCE_EXHAUSTED or INTERNAL, "grpc: received message larger than
// max (N vs. M)" and the like), indistinguishable by code from one the
// upstream sent, so they are told by gRPC's message and, for the size,
// by this client's limit; a test holds the messages to the gRPC the proxy
// is built with.
func ReplyLost(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	msg := st.Message()
	switch st.Code() {
	case codes.ResourceExhausted:
		return strings.HasPrefix(msg, "grpc: received message larger than max") && strings.HasSuffix(msg, " vs. "+strconv.Itoa(MaxReplySize)+")") ||
			strings.HasPrefix(msg, "grpc: received message after decompression larger than max") ||
			strings.HasPrefix(msg, "grpc: message after decompression larger than max")
	case codes.Internal:
		return strings.HasPrefix(msg, "grpc: failed to unmarshal the received message") ||
			strings.HasPrefix(msg, "grpc: failed to decompress") ||
			strings.HasPrefix(msg, "grpc: failed to read decompressed data") ||
			strings.HasPrefix(msg, "grpc: no decompressor available")
	}
	return false
}

// SizeFailure reports whether err is a message size failure of gRPC's
// (ours or the upstream's: "grpc: received message larger than max",
// "trying to send message larger than max", …), which gRPC reports as
// RESOURCE_EXHAUSTED. To a CO that code means "no room here": on
// CreateVolume the external-provisioner reschedules the claim. A
// message that is too big is no such thing, so the proxy answers INTERNAL
// instead (pkg/csi).
func SizeFailure(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return false
	}
	msg := st.Message()
	for _, p := range []string{"grpc: received message", "grpc: message after decompression", "grpc: message too large", "trying to send message larger than max", "grpc: trying to send message larger than max"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
