package upstream

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestReplyLost: a reply over this client's limit, or one that does not
// decode, is lost; the upstream's own refusals are not, and an upstream
// server that could not receive the proxy's request (its limit, not ours)
// is a size failure but no lost reply: it did nothing.
func TestReplyLost(t *testing.T) {
	for _, tc := range []struct {
		name             string
		err              error
		lost, sizeFailed bool
	}{
		{"over our limit", status.Error(codes.ResourceExhausted, "grpc: received message larger than max (17825841 vs. 16777216)"), true, true},
		{"the upstream could not receive our request", status.Error(codes.ResourceExhausted, "grpc: received message larger than max (5000000 vs. 4194304)"), false, true},
		{"undecodable", status.Error(codes.Internal, "grpc: failed to unmarshal the received message: proto: cannot parse invalid wire-format data"), true, false},
		{"our request too large to send", status.Error(codes.ResourceExhausted, "trying to send message larger than max (2147483648 vs. 2147483647)"), false, true},
		{"the upstream is full", status.Error(codes.ResourceExhausted, "pool is full"), false, false},
		{"the upstream failed", status.Error(codes.Internal, "disk on fire"), false, false},
		{"not a status", errors.New("grpc: received message larger than max (17825841 vs. 16777216)"), false, false},
	} {
		if got := ReplyLost(tc.err); got != tc.lost {
			t.Errorf("%s: ReplyLost = %v, want %v", tc.name, got, tc.lost)
		}
		if got := SizeFailure(tc.err); got != tc.sizeFailed {
			t.Errorf("%s: SizeFailure = %v, want %v", tc.name, got, tc.sizeFailed)
		}
	}
}
