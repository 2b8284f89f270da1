package config

import (
	"strings"
	"testing"

	"github.com/democratic-csi/proxy-topology/pkg/accessible"
)

// TestValidateEndpointNoImplicitSocket: only unix:///absolute/path reaches a
// unix socket, and only an explicit host:port reaches TCP. gRPC reads
// anything before a colon as a scheme (case-insensitively), so each of
// these would otherwise pass as host:port and then be dialled as something
// else: a socket relative to the proxy's working directory, an abstract
// socket, a path.
func TestValidateEndpointNoImplicitSocket(t *testing.T) {
	tests := []struct{ ep, want string }{
		{"unix://relative/csi.sock", "unix endpoint needs an absolute path"},
		{"unix:relative.sock", "unix endpoint needs an absolute path"},
		{"Unix:relative.sock", `port "relative.sock" is not a number`},
		{"UNIX:/abs/csi.sock", `port "/abs/csi.sock" is not a number`},
		{"unix-abstract:csi", `port "csi" is not a number`},
		{"csi.sock", "is neither unix:///path nor host:port"},
		{"/run/csi/csi.sock", "is neither unix:///path nor host:port"},
		{"./csi.sock", "is neither unix:///path nor host:port"},
		{"/run/csi:9000", `host "/run/csi" is neither a DNS name nor an IP address`},
		{"run/csi:9000", `host "run/csi" is neither a DNS name nor an IP address`},
		{"a b:9000", `host "a b" is neither a DNS name nor an IP address`},
		{"-host:9000", `host "-host" is neither a DNS name nor an IP address`},
		{"host..example:9000", `host "host..example" is neither a DNS name nor an IP address`},
		{"host:http", `port "http" is not a number from 1 to 65535`},
		{"host:0", `port "0" is not a number from 1 to 65535`},
		{"host:65536", `port "65536" is not a number from 1 to 65535`},
		{"host:-1", `port "-1" is not a number from 1 to 65535`},
		{"host:+80", `port "+80" is not a number from 1 to 65535`},
		{"passthrough:///host:9000", "only unix:// and host:port endpoints are supported"},
	}
	for _, tt := range tests {
		t.Run(tt.ep, func(t *testing.T) {
			err := ValidateEndpoint(tt.ep)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ValidateEndpoint(%q) = %v, want an error containing %q", tt.ep, err, tt.want)
			}
			// The same refusal as a connection file, naming the key.
			for _, key := range []string{"endpoint", "nodeEndpoint"} {
				doc := "driver: csi\ncsi:\n  endpoint: '" + tt.ep + "'\n"
				if key == "nodeEndpoint" {
					doc = "driver: csi\ncsi:\n  endpoint: unix:///ok.sock\n  nodeEndpoint: '" + tt.ep + "'\n"
				}
				_, _, err := ParseConnection("c.yaml", []byte(doc), accessible.Options{Prefix: "p.example.com", Type: "zone"})
				if err == nil || !strings.Contains(err.Error(), "csi."+key+": ") || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("%s: ParseConnection = %v, want csi.%s: …%s", key, err, key, tt.want)
				}
			}
		})
	}
	for _, ep := range []string{"host:1", "host:65535", "nfs-1.example.com:9000", "NFS.example.com.:9000", "192.0.2.1:9000", "[2001:db8::1]:9000", "unix-abstract:9000"} {
		t.Run("valid "+ep, func(t *testing.T) {
			if err := ValidateEndpoint(ep); err != nil {
				t.Error(err)
			}
		})
	}
}
