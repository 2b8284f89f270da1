package endpoint

import "testing"

func TestParse(t *testing.T) {
	tests := []struct {
		in    string
		forms Form
		want  Endpoint
		// canonical is want.String().
		canonical string
	}{
		{"unix:///run/csi/csi.sock", Upstream, Endpoint{Unix, "/run/csi/csi.sock"}, "unix:///run/csi/csi.sock"},
		{"unix:/run/csi/csi.sock", Upstream, Endpoint{Unix, "/run/csi/csi.sock"}, "unix:///run/csi/csi.sock"},
		{"unix:///run/csi/../csi//csi.sock", Listen, Endpoint{Unix, "/run/csi/csi.sock"}, "unix:///run/csi/csi.sock"},
		{"unix:///", Upstream, Endpoint{Unix, "/"}, "unix:///"},
		{"/run/csi/csi.sock", Dial, Endpoint{Unix, "/run/csi/csi.sock"}, "unix:///run/csi/csi.sock"},
		{"localhost:10000", Upstream, Endpoint{TCP, "localhost:10000"}, "tcp://localhost:10000"},
		{"nfs-1.example.com.:9000", Upstream, Endpoint{TCP, "nfs-1.example.com.:9000"}, "tcp://nfs-1.example.com.:9000"},
		{"[2001:db8::1]:9000", Upstream, Endpoint{TCP, "[2001:db8::1]:9000"}, "tcp://[2001:db8::1]:9000"},
		{"unix-abstract:9000", Upstream, Endpoint{TCP, "unix-abstract:9000"}, "tcp://unix-abstract:9000"},
		{"tcp://127.0.0.1:10000", Dial, Endpoint{TCP, "127.0.0.1:10000"}, "tcp://127.0.0.1:10000"},
		{"tcp://127.0.0.1:0", Listen, Endpoint{TCP, "127.0.0.1:0"}, "tcp://127.0.0.1:0"},
		{"tcp://:10000", Listen, Endpoint{TCP, ":10000"}, "tcp://:10000"},
		{"tcp://:0", Listen, Endpoint{TCP, ":0"}, "tcp://:0"},
		{"host:65535", Any, Endpoint{TCP, "host:65535"}, "tcp://host:65535"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Parse(tt.in, tt.forms)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want || got.String() != tt.canonical {
				t.Errorf("Parse = %+v (%s), want %+v (%s)", got, got, tt.want, tt.canonical)
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	tests := []struct {
		in    string
		forms Form
		want  string
	}{
		{"unix://csi.sock", Upstream, `"unix://csi.sock": unix endpoint needs an absolute path (unix:///path/to/csi.sock)`},
		{"unix://", Upstream, `"unix://": unix endpoint needs an absolute path (unix:///path/to/csi.sock)`},
		{"unix:csi.sock", Listen, `"unix:csi.sock": unix endpoint needs an absolute path (unix:///path/to/csi.sock)`},
		{"unix:", Dial, `"unix:": unix endpoint needs an absolute path (unix:///path/to/csi.sock)`},
		{"http://x", Upstream, `"http://x": only unix:// and host:port endpoints are supported`},
		{"tcp://host:9000", Upstream, `"tcp://host:9000": only unix:// and host:port endpoints are supported`},
		{"passthrough:///host:9000", Listen, `"passthrough:///host:9000": only unix:// and tcp:// endpoints are supported`},
		{"dns:///host:9000", Dial, `"dns:///host:9000": only unix://, /path and tcp:// endpoints are supported`},
		{"foo", Upstream, `"foo" is neither unix:///path nor host:port`},
		{"/csi/csi.sock", Upstream, `"/csi/csi.sock" is neither unix:///path nor host:port`},
		{"csi.sock", Listen, `"csi.sock" is neither unix:///path nor tcp://host:port`},
		{"csi.sock", Dial, `"csi.sock" is none of unix:///path, /path or tcp://host:port`},
		{"/run/csi.sock", Listen, `"/run/csi.sock" is neither unix:///path nor tcp://host:port`},
		{"host:9000", Listen, `"host:9000" is neither unix:///path nor tcp://host:port`},
		{"tcp://host", Listen, `"tcp://host" is neither unix:///path nor tcp://host:port`},
		{"", Upstream, `"" is neither unix:///path nor host:port`},
		{":9000", Upstream, `":9000" is neither unix:///path nor host:port`},
		{"tcp://:9000", Dial, `"tcp://:9000" is none of unix:///path, /path or tcp://host:port`},
		{"tcp://:", Listen, `"tcp://:" is neither unix:///path nor tcp://host:port`},
		{"tcp://:x", Listen, `"tcp://:x": port "x" is not a number from 0 to 65535 (a unix socket is written unix:///path)`},
		{"host:", Upstream, `"host:" is neither unix:///path nor host:port`},
		{"::1:9000", Upstream, `"::1:9000" is neither unix:///path nor host:port`},
		{"Unix:relative.sock", Upstream, `"Unix:relative.sock": port "relative.sock" is not a number from 1 to 65535 (a unix socket is written unix:///path)`},
		{"host:0", Upstream, `"host:0": port "0" is not a number from 1 to 65535 (a unix socket is written unix:///path)`},
		{"tcp://host:0", Dial, `"tcp://host:0": port "0" is not a number from 1 to 65535 (a unix socket is written unix:///path)`},
		{"tcp://host:080", Listen, `"tcp://host:080": port "080" is not a number from 0 to 65535 (a unix socket is written unix:///path)`},
		{"host:+80", Upstream, `"host:+80": port "+80" is not a number from 1 to 65535 (a unix socket is written unix:///path)`},
		{"host:65536", Upstream, `"host:65536": port "65536" is not a number from 1 to 65535 (a unix socket is written unix:///path)`},
		{"/run/csi:9000", Upstream, `"/run/csi:9000": host "/run/csi" is neither a DNS name nor an IP address (a unix socket is written unix:///path)`},
		{"-host:9000", Upstream, `"-host:9000": host "-host" is neither a DNS name nor an IP address (a unix socket is written unix:///path)`},
		{"tcp://a b:9000", Dial, `"tcp://a b:9000": host "a b" is neither a DNS name nor an IP address (a unix socket is written unix:///path)`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Parse(tt.in, tt.forms)
			if err == nil || err.Error() != tt.want {
				t.Errorf("Parse = %+v, %v; want the error %s", got, err, tt.want)
			}
		})
	}
}

func TestTarget(t *testing.T) {
	for in, want := range map[string]string{
		"unix:/run/csi.sock": "unix:///run/csi.sock",
		"/run/csi.sock":      "unix:///run/csi.sock",
		"tcp://host:9000":    "dns:///host:9000",
	} {
		ep, err := Parse(in, Any)
		if err != nil {
			t.Fatal(err)
		}
		if got := ep.Target(); got != want {
			t.Errorf("Parse(%q).Target() = %q, want %q", in, got, want)
		}
	}
}
