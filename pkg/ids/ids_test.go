package ids

import (
	"errors"
	"strings"
	"testing"
)

func TestEncodeParseRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		kind      Kind
		conn, hdl string
		want      string
	}{
		{Volume, "nfs", "pvc-1", "v:nfs/pvc-1"},
		{Snapshot, "a.b_c-d", "snap/with/slashes", "s:a.b_c-d/snap/with/slashes"},
		{Volume, "x", "h:with:colons", "v:x/h:with:colons"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			got, err := Encode(tc.kind, tc.conn, tc.hdl, 0)
			if err != nil || got != tc.want {
				t.Fatalf("Encode = %q, %v; want %q", got, err, tc.want)
			}
			id, err := Parse(tc.kind, got)
			if err != nil {
				t.Fatal(err)
			}
			if id.Connection != tc.conn || id.Handle != tc.hdl || id.Kind != tc.kind {
				t.Fatalf("Parse = %+v", id)
			}
		})
	}
}

// TestEncodeLimits: with a limit (proxy.maxIdLength: 128) an ID one byte
// over it is refused naming both lengths; without one (0) it is returned,
// and parses back.
func TestEncodeLimits(t *testing.T) {
	conn := "conn"
	handle := strings.Repeat("h", MaxLength-len("v:conn/"))
	if _, err := Encode(Volume, conn, handle, MaxLength); err != nil {
		t.Fatalf("exactly %d bytes must be accepted: %v", MaxLength, err)
	}
	_, err := Encode(Volume, conn, handle+"x", MaxLength)
	if !errors.Is(err, ErrTooLong) {
		t.Fatalf("want ErrTooLong, got %v", err)
	}
	for _, part := range []string{"129 bytes", "proxy.maxIdLength 128", `connection name "conn" is 4 bytes`, "upstream handle is 122 bytes"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("message %q lacks %q", err, part)
		}
	}
	// No limit: the seed's 123-byte snapshot handles under a long name.
	long := strings.Repeat("c", MaxConnectionName)
	s, err := Encode(Snapshot, long, strings.Repeat("h", 123), 0)
	if err != nil || len(s) != 3+63+123 {
		t.Fatalf("Encode without a limit = %d bytes, %v", len(s), err)
	}
	if id, err := Parse(Snapshot, s); err != nil || id.Connection != long {
		t.Fatalf("a long ID must parse back: %+v, %v", id, err)
	}
	if _, err := Encode(Volume, conn, strings.Repeat("h", MaxHandle+1), 0); !errors.Is(err, ErrTooLong) {
		t.Fatalf("a handle over MaxHandle: want ErrTooLong, got %v", err)
	}
	if _, err := Encode(Volume, conn, "", 0); !errors.Is(err, ErrMalformed) {
		t.Fatalf("empty handle: want ErrMalformed, got %v", err)
	}
}

func TestParseMalformed(t *testing.T) {
	for _, s := range []string{
		"", "v", "v:", "v:/h", "v:conn", "v:conn/", "s:conn/h", "x:conn/h", "vol-123",
		"v:../h", "v:.hidden/h", "v:a\x00b/h", "v:" + strings.Repeat("c", 64) + "/h",
		"v:c/" + strings.Repeat("h", MaxParsed), "v:c/" + strings.Repeat("h", MaxHandle+1), "v:ünï/h",
	} {
		t.Run(s, func(t *testing.T) {
			if _, err := Parse(Volume, s); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Parse(%q) err = %v, want ErrMalformed", s, err)
			}
		})
	}
}

func TestValidateConnectionName(t *testing.T) {
	for name, ok := range map[string]bool{
		"a": true, "A9": true, "zone-1.nfs_x": true, strings.Repeat("a", 63): true,
		"": false, ".": false, "..": false, "../etc": false, "a/b": false, "-a": false,
		"_a": false, "a b": false, "a\x00": false, strings.Repeat("a", 64): false, "日本": false,
	} {
		if err := ValidateConnectionName(name); (err == nil) != ok {
			t.Errorf("ValidateConnectionName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"v:conn/h", "s:c/x/y", "v:../x", "v:c/", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, k := range []Kind{Volume, Snapshot} {
			id, err := Parse(k, s)
			if err != nil {
				continue
			}
			// Anything that parses must re-encode to itself and name a
			// connection that cannot escape the folder.
			again, err := Encode(k, id.Connection, id.Handle, 0)
			if err != nil || again != s {
				t.Fatalf("Parse(%q) = %+v, re-encoded %q, %v", s, id, again, err)
			}
			if strings.ContainsAny(id.Connection, "/\x00") || strings.HasPrefix(id.Connection, ".") {
				t.Fatalf("unsafe connection name %q", id.Connection)
			}
		}
	})
}

func FuzzValidateConnectionName(f *testing.F) {
	for _, s := range []string{"a", "..", "a/b", "a\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ValidateConnectionName(s) == nil {
			if s == "" || len(s) > MaxConnectionName || strings.ContainsAny(s, "/\\\x00 ") || s[0] == '.' {
				t.Fatalf("accepted unsafe name %q", s)
			}
		}
	})
}
