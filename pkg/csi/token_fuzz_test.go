package csi

import (
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/ids"
)

// FuzzDecodeToken feeds arbitrary starting tokens to decodeToken: the CO
// hands back whatever it was given, or anything at all. A token is either
// refused with ABORTED and a short, valid UTF-8 message (the token is
// shown cut to 80 bytes, quoted), or names a valid
// connection and survives a round trip through encodeToken.
func FuzzDecodeToken(f *testing.F) {
	f.Add("")
	f.Add(encodeToken("nfs", "up-7"))
	f.Add(encodeToken("a.b_c-d", ""))
	f.Add(encodeToken("z", strings.Repeat("t", 300)))
	f.Add("pt1.Li4.dA")             // connection ".."
	f.Add("pt1.bmZz.dA==")          // padded base64
	f.Add("pt1..")                  // empty connection
	f.Add("pt1.bmZz.dA.x")          // four parts
	f.Add("pt2.bmZz.dA")            // another version
	f.Add("pt1.bmZzAA.dA")          // NUL in the connection
	f.Add("pt1.bmZz." + "é" + "dA") // not base64
	f.Fuzz(func(t *testing.T, tok string) {
		conn, upstreamToken, err := decodeToken(tok)
		if err != nil {
			st := status.Convert(err)
			if st.Code() != codes.Aborted {
				t.Fatalf("decodeToken(%q): code %v, want Aborted", tok, st.Code())
			}
			if len(st.Message()) > 512 || !utf8.ValidString(st.Message()) {
				t.Fatalf("decodeToken(%q): message %q is too long or not UTF-8", tok, st.Message())
			}
			return
		}
		if tok == "" {
			if conn != "" || upstreamToken != "" {
				t.Fatalf("empty token decoded to %q, %q", conn, upstreamToken)
			}
			return
		}
		if err := ids.ValidateConnectionName(conn); err != nil {
			t.Fatalf("decodeToken(%q) accepted connection %q: %v", tok, conn, err)
		}
		c2, u2, err := decodeToken(encodeToken(conn, upstreamToken))
		if err != nil || c2 != conn || u2 != upstreamToken {
			t.Fatalf("round trip of %q, %q: %q, %q, %v", conn, upstreamToken, c2, u2, err)
		}
	})
}

// A value cut short for a message is cut between characters, so the
// message stays valid UTF-8 (a listing token or segment written by a user).
func TestTruncateKeepsCharacters(t *testing.T) {
	for _, tt := range []struct {
		in   string
		n    int
		want string
	}{
		{"abc", 5, "abc"},
		{"abcdef", 3, "abc…"},
		{"zöne", 2, "z…"}, // byte 2 is inside 'ö'
		{"zöne", 3, "zö…"},
	} {
		got := truncate(tt.in, tt.n)
		if got != tt.want || !utf8.ValidString(got) {
			t.Errorf("truncate(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}
