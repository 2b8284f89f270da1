// Package endpoint parses CSI endpoints: the socket the proxy listens on
// (--csi-endpoint), the upstreams a connection file names (csi.endpoint,
// csi.nodeEndpoint) and the socket the csi command dials (--endpoint).
// Each accepts some of the ways an endpoint is written (Form); Parse reads
// them all with one grammar and refuses the rest with one set of messages.
//
// Nothing is inferred: a unix socket is written unix:///absolute/path (or
// unix:/absolute/path), or a bare absolute path where Path is accepted, and
// TCP is an explicit host:port or tcp://host:port. host:port is checked
// strictly (a DNS name or an IP literal, a numeric port) because gRPC reads
// anything before a colon as a scheme: "Unix:csi.sock" would otherwise pass
// as host:port and be dialled as a socket relative to the working
// directory.
package endpoint

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
)

// Scheme is the transport of an endpoint.
type Scheme string

// The schemes.
const (
	Unix Scheme = "unix"
	TCP  Scheme = "tcp"
)

// Endpoint is a parsed endpoint.
type Endpoint struct {
	Scheme Scheme
	// Address is the socket's absolute path, cleaned, for Unix; host:port
	// for TCP.
	Address string
}

// String is the canonical form: unix:///path or tcp://host:port. Two
// spellings of one endpoint (unix:/a and unix:///a/) have the same String.
func (e Endpoint) String() string {
	if e.Scheme == Unix {
		return "unix://" + e.Address
	}
	return "tcp://" + e.Address
}

// Target is the gRPC target that reaches e: unix:///path, or
// dns:///host:port (explicitly DNS: gRPC would read a host such as
// "unix-abstract" as a scheme).
func (e Endpoint) Target() string {
	if e.Scheme == Unix {
		return "unix://" + e.Address
	}
	return "dns:///" + e.Address
}

// Form is a set of ways of writing an endpoint that a caller accepts.
type Form uint8

// The ways of writing an endpoint.
const (
	// UnixURL is unix:///absolute/path or unix:/absolute/path.
	UnixURL Form = 1 << iota
	// Path is a bare /absolute/path, a unix socket.
	Path
	// TCPURL is tcp://host:port.
	TCPURL
	// HostPort is a bare host:port.
	HostPort
	// AnyPort also accepts port 0 (any free port) in a TCP endpoint, for
	// a listener.
	AnyPort
	// AnyHost also accepts an empty host (tcp://:port, every interface)
	// in a TCP endpoint, for a listener.
	AnyHost
)

// The forms each reader of endpoints accepts.
const (
	// Upstream is a connection file's csi.endpoint and csi.nodeEndpoint.
	Upstream = UnixURL | HostPort
	// Listen is the proxy's own --csi-endpoint (TCP for tests).
	Listen = UnixURL | TCPURL | AnyPort | AnyHost
	// Dial is the csi command's --endpoint.
	Dial = UnixURL | Path | TCPURL
	// Any is every form, for comparing endpoints however written.
	Any = UnixURL | Path | TCPURL | HostPort
)

// Parse reads s as one of forms. Its errors quote s and say what is wrong
// and what is accepted; callers prefix them with the flag or key at fault.
func Parse(s string, forms Form) (Endpoint, error) {
	if path, ok := cutUnix(s); ok && forms&UnixURL != 0 {
		if !filepath.IsAbs(path) {
			return Endpoint{}, fmt.Errorf("%q: unix endpoint needs an absolute path (unix:///path/to/csi.sock)", s)
		}
		return Endpoint{Scheme: Unix, Address: filepath.Clean(path)}, nil
	}
	if forms&Path != 0 && filepath.IsAbs(s) {
		return Endpoint{Scheme: Unix, Address: filepath.Clean(s)}, nil
	}
	if hostPort, ok := strings.CutPrefix(s, "tcp://"); ok && forms&TCPURL != 0 {
		return parseHostPort(s, hostPort, forms)
	}
	if strings.Contains(s, "://") {
		return Endpoint{}, fmt.Errorf("%q: only %s endpoints are supported", s, schemes(forms))
	}
	if forms&HostPort == 0 {
		return Endpoint{}, fmt.Errorf("%q is %s", s, describe(forms))
	}
	return parseHostPort(s, s, forms)
}

// cutUnix returns the path of unix:///path or unix:path.
func cutUnix(s string) (string, bool) {
	if path, ok := strings.CutPrefix(s, "unix://"); ok {
		return path, true
	}
	return strings.CutPrefix(s, "unix:")
}

// parseHostPort checks the host:port of s strictly.
func parseHostPort(s, hostPort string, forms Form) (Endpoint, error) {
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil || (host == "" && forms&AnyHost == 0) || port == "" {
		return Endpoint{}, fmt.Errorf("%q is %s", s, describe(forms))
	}
	min := 1
	if forms&AnyPort != 0 {
		min = 0
	}
	if n, err := strconv.Atoi(port); err != nil || n < min || n > 65535 || (port[0] == '0' && port != "0") || port[0] == '+' {
		return Endpoint{}, fmt.Errorf("%q: port %q is not a number from %d to 65535 (a unix socket is written unix:///path)", s, port, min)
	}
	if host != "" && net.ParseIP(host) == nil && !isHostname(host) {
		return Endpoint{}, fmt.Errorf("%q: host %q is neither a DNS name nor an IP address (a unix socket is written unix:///path)", s, host)
	}
	return Endpoint{Scheme: TCP, Address: hostPort}, nil
}

// schemes names the ways of writing forms, for "only … are supported".
func schemes(forms Form) string {
	return join(names(forms, "unix://", "/path", "tcp://", "host:port"), "and")
}

// describe is what s is not, for an endpoint that matches no form: "neither
// unix:///path nor host:port".
func describe(forms Form) string {
	out := names(forms, "unix:///path", "/path", "tcp://host:port", "host:port")
	switch len(out) {
	case 1:
		return "not " + out[0]
	case 2:
		return "neither " + out[0] + " nor " + out[1]
	}
	return "none of " + join(out, "or")
}

// names picks, in order, the name of each of UnixURL, Path, TCPURL and
// HostPort that forms holds.
func names(forms Form, unixURL, path, tcpURL, hostPort string) []string {
	var out []string
	for _, f := range []struct {
		form Form
		name string
	}{{UnixURL, unixURL}, {Path, path}, {TCPURL, tcpURL}, {HostPort, hostPort}} {
		if forms&f.form != 0 {
			out = append(out, f.name)
		}
	}
	return out
}

// join lists words: "a", "a and b", "a, b and c".
func join(words []string, and string) string {
	if len(words) <= 1 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " " + and + " " + words[len(words)-1]
}

// isHostname reports whether s is a DNS name: dot-separated labels of
// letters, digits and inner hyphens, with an optional trailing dot.
func isHostname(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}
