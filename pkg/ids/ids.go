// Package ids encodes and parses the proxy's volume and snapshot IDs, which
// carry the connection name in front of the upstream's own handle.
package ids

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/democratic-csi/proxy-topology/pkg/clip"
)

// MaxLength is the CSI limit for string fields such as volume_id (spec:
// "SHALL NOT exceed 128 bytes"). The proxy enforces it only when
// proxy.maxIdLength says so: real upstreams use most of it for their own
// handles, and Kubernetes stores longer volume and snapshot handles.
const MaxLength = 128

// MaxHandle is the longest upstream handle an ID may carry, and so, with
// the connection name, bounds what Parse accepts: far beyond any real
// driver's handle, it keeps a hostile ID from costing more than a few
// hundred bytes of work.
const MaxHandle = 1024

// MaxParsed is the longest ID Parse accepts: "<kind>:", the longest
// connection name, "/" and the longest handle.
const MaxParsed = 3 + MaxConnectionName + MaxHandle

// MinMaxLength is the smallest limit Encode may be given: room for the
// prefix, a one-byte name, the separator and a few bytes of handle.
const MinMaxLength = 16

// MaxConnectionName is the longest accepted connection name. It keeps names
// usable as Kubernetes label values and leaves room for the upstream handle.
const MaxConnectionName = 63

// Kind says what an ID names.
type Kind byte

const (
	Volume   Kind = 'v'
	Snapshot Kind = 's'
)

func (k Kind) String() string {
	if k == Snapshot {
		return "snapshot"
	}
	return "volume"
}

// ErrMalformed marks an ID that was not made by the proxy.
var ErrMalformed = errors.New("malformed id")

// ErrTooLong marks an ID over the limit Encode was given, or a handle over
// MaxHandle.
var ErrTooLong = errors.New("id too long")

// ID is a parsed proxy ID.
type ID struct {
	Kind       Kind
	Connection string
	Handle     string // the upstream's id, opaque
}

// String renders "<kind>:<connection>/<handle>".
func (id ID) String() string {
	return string(id.Kind) + ":" + id.Connection + "/" + id.Handle
}

// Encode renders the ID. max is the longest ID allowed (proxy.maxIdLength);
// 0 allows any ID whose handle is at most MaxHandle bytes. The error says
// how long the connection name and the handle are, so an admin knows which
// to shorten.
func Encode(kind Kind, connection, handle string, max int) (string, error) {
	if handle == "" {
		return "", fmt.Errorf("%w: upstream returned an empty %s id", ErrMalformed, kind)
	}
	s := ID{Kind: kind, Connection: connection, Handle: handle}.String()
	if max > 0 && len(s) > max {
		return "", fmt.Errorf("%w: %s id would be %d bytes, over proxy.maxIdLength %d (connection name %q is %d bytes, upstream handle is %d bytes; prefix and separators take 3)",
			ErrTooLong, kind, len(s), max, connection, len(connection), len(handle))
	}
	if len(handle) > MaxHandle {
		return "", fmt.Errorf("%w: upstream %s handle is %d bytes, over the %d the proxy accepts back (connection name %q)",
			ErrTooLong, kind, len(handle), MaxHandle, connection)
	}
	return s, nil
}

// Parse splits an ID of the given kind. Anything the proxy could not have
// made (wrong kind, no separator, invalid connection name, empty handle)
// returns ErrMalformed.
func Parse(kind Kind, s string) (ID, error) {
	if len(s) > MaxParsed {
		return ID{}, fmt.Errorf("%w: %s id is %d bytes, longer than any the proxy makes (%d)", ErrMalformed, kind, len(s), MaxParsed)
	}
	if len(s) < 2 || s[0] != byte(kind) || s[1] != ':' {
		return ID{}, fmt.Errorf("%w: %s id %q does not start with %q", ErrMalformed, kind, s, string(kind)+":")
	}
	conn, handle, ok := strings.Cut(s[2:], "/")
	if !ok {
		return ID{}, fmt.Errorf("%w: %s id %q has no '/' between connection and handle", ErrMalformed, kind, s)
	}
	if err := ValidateConnectionName(conn); err != nil {
		return ID{}, fmt.Errorf("%w: %s id %q: %v", ErrMalformed, kind, s, err)
	}
	if handle == "" {
		return ID{}, fmt.Errorf("%w: %s id %q has an empty handle", ErrMalformed, kind, s)
	}
	if len(handle) > MaxHandle {
		return ID{}, fmt.Errorf("%w: %s id's handle is %d bytes, longer than any the proxy makes (%d)", ErrMalformed, kind, len(handle), MaxHandle)
	}
	return ID{Kind: kind, Connection: conn, Handle: handle}, nil
}

// ValidateConnectionName accepts [A-Za-z0-9][A-Za-z0-9._-]* up to
// MaxConnectionName bytes. Because '/' and a leading '.' are refused, a valid
// name can never address anything outside the connection folder.
func ValidateConnectionName(name string) error {
	if name == "" {
		return errors.New("connection name is empty")
	}
	if len(name) > MaxConnectionName {
		return fmt.Errorf("connection name is %d bytes, longer than %d", len(name), MaxConnectionName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if alnum || i > 0 && (c == '.' || c == '_' || c == '-') {
			continue
		}
		// The whole character, not its first byte: a name written as
		// "zöne" must be told about 'ö', never about 'Ã' (0xc3).
		r, _ := utf8.DecodeRuneInString(name[i:])
		return fmt.Errorf("connection name %q has invalid character %q at byte %d (allowed: letters, digits, and . _ - after the first)", printable(name), r, i)
	}
	return nil
}

// printable keeps hostile names (NUL, control bytes, huge) readable in
// messages.
func printable(s string) string {
	return strings.ToValidUTF8(clip.String(s, 80), "?")
}
