package clip

import (
	"strings"
	"testing"
)

func TestClip(t *testing.T) {
	long := strings.Repeat("a", 120000)
	for _, tc := range []struct{ name, got, want string }{
		{"short string", String("abc", 8), "abc"},
		{"long string", String(long, 3), "aaa…(120000 bytes)"},
		{"never splits a character", String("zöne", 2), "z…(5 bytes)"},
		{"quote", Quote("a\nb"), `"a\nb"`},
		{"quote cut", QuoteN(long, 3), `"aaa…" (120000 bytes)`},
		{"plain", Plain("conns/a.yaml"), "conns/a.yaml"},
		{"newline quoted", Plain("a.yaml: ok\nb.yaml"), `"a.yaml: ok\nb.yaml"`},
		{"ESC quoted", Plain("\x1b[31mred"), `"\x1b[31mred"`},
		{"quote quoted", Plain(`"x"`), `"\"x\""`},
		{"empty quoted", Plain(""), `""`},
		{"invalid UTF-8 quoted", Plain("a\xffb"), `"a\xffb"`},
		{"long plain cut", PlainN(long, 4), `"aaaa…" (120000 bytes)`},
		{"invalid UTF-8 dropped from a cut head", String("\xff\xfeabc", 4), "ab…(5 bytes)"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}
