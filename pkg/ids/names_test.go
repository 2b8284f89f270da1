package ids

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// Names come out as the user wrote them: a non-ASCII name is refused
// naming the character itself, and a long one is shortened on a character
// boundary (never into "\xc3" escapes or a split character).
func TestInvalidNamesStayReadable(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"zöne", `connection name "zöne" has invalid character 'ö' at byte 1`},
		{"数据", `connection name "数据" has invalid character '数' at byte 0`},
		{"a b", `connection name "a b" has invalid character ' ' at byte 1`},
		{"nfs\x00", `connection name "nfs\x00" has invalid character '\x00' at byte 3`},
	} {
		err := ValidateConnectionName(tc.name)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("ValidateConnectionName(%q) = %v, want %s …", tc.name, err, tc.want)
		}
	}
	long := strings.Repeat("ö", 50) // 100 bytes; byte 80 is inside no character
	got := printable("x" + long)
	if !utf8.ValidString(got) || strings.Contains(got, "?") || !strings.HasSuffix(got, "ö…(101 bytes)") {
		t.Errorf("printable cut %q inside a character, or without the length", got)
	}
	if _, err := Parse(Volume, "v:zöne/vol-1"); err == nil || !strings.Contains(err.Error(), `invalid character 'ö'`) {
		t.Errorf("Parse of a non-ASCII connection: %v, want the character named", err)
	}
}
