// Package clip bounds the strings a caller (or an upstream, or a file)
// sends before they go into an error message or a log line: a 120 KB
// volume ID must not make a 120 KB line, and a name holding a newline or
// an ESC must not start a forged line or reach a terminal. Every message
// and the logger (pkg/logging) cut through String, so a cut string reads
// the same everywhere: its first bytes, "…", and its full length.
package clip

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Max is how much of a caller's string a message shows: the CSI limit on
// a string field (128 bytes). Anything longer is cut.
const Max = 128

// String returns s whole when it is at most max bytes, else its first
// max bytes (fewer, so no character is split; invalid UTF-8 dropped)
// followed by "…(N bytes)", N being len(s). It does not quote.
func String(s string, max int) string {
	head, cut := Head(s, max)
	if !cut {
		return s
	}
	return head + "…(" + strconv.Itoa(len(s)) + " bytes)"
}

// Quote is s in Go %q style, cut to Max bytes: "abc", or when cut
// "abc…" (120000 bytes). The result is one line of printable text
// whatever s holds.
func Quote(s string) string { return QuoteN(s, Max) }

// QuoteN is Quote with a bound of max bytes.
func QuoteN(s string, max int) string {
	head, cut := Head(s, max)
	if !cut {
		return strconv.Quote(s)
	}
	return strconv.Quote(head+"…") + " (" + strconv.Itoa(len(s)) + " bytes)"
}

// Plain is s as it is when it is plain text of at most Max bytes, else
// Quote(s): a name or key reads bare where it is harmless, and quoted
// where it could start a forged line, reach a terminal (a newline, an ESC)
// or be mistaken for a quoted one.
func Plain(s string) string { return PlainN(s, Max) }

// PlainN is Plain with a bound of max bytes.
func PlainN(s string, max int) string {
	if len(s) <= max && s != "" && isPlain(s) {
		return s
	}
	return QuoteN(s, max)
}

// isPlain reports valid UTF-8 of printable characters (spaces included),
// without a quote or a backslash.
func isPlain(s string) bool {
	if !utf8.ValidString(s) || strings.ContainsAny(s, "\"\\") {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// Head is s cut to at most max bytes on a character boundary, with any
// invalid UTF-8 of the head dropped, and whether it was cut.
func Head(s string, max int) (string, bool) {
	if len(s) <= max {
		return s, false
	}
	n := max
	for n > 0 && !utf8.RuneStart(s[n]) {
		n-- // never split a character: "zöne" must not become "z\xc3…"
	}
	head := s[:n]
	if !utf8.ValidString(head) {
		head = toValid(head)
	}
	return head, true
}

func toValid(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r != utf8.RuneError || size > 1 {
			out = append(out, s[i:i+size]...)
		}
		i += size
	}
	return string(out)
}
