package config

import (
	"strings"
	"testing"

	"github.com/democratic-csi/proxy-topology/pkg/accessible"
)

// TestParseConnectionHidesSecrets: a connection file whose secrets are
// mistyped fails with the line and the reason, never the value. yaml.v3
// quotes the offending value in type errors, and the error is logged and
// returned to the CO.
func TestParseConnectionHidesSecrets(t *testing.T) {
	head := "driver: csi\ncsi:\n  endpoint: unix:///up.sock\n"
	tests := []struct {
		name, doc string
		secrets   []string // values (or the prefix yaml.v3 shows) that must not appear
		want      string   // the message still says what is wrong
	}{
		{"scalar instead of a map", head + "  secrets: pw=hunter2\n", []string{"hunter2"}, "csi.secrets: line 4: want a mapping of names to strings; got a string"},
		{"long scalar instead of a map", head + "  secrets: password=correct-horse-battery\n", []string{"passwor", "correct-horse"}, "csi.secrets: line 4: want a mapping of names to strings; got a string"},
		{"tagged value", head + "  secrets:\n    pw: !!int hunter2\n", []string{"hunter2"}, "cannot decode !!str `(secret)` as a !!int"},
		{"tagged long value", head + "  secrets:\n    pw: !!float correct-horse-battery\n", []string{"correct"}, "cannot decode !!str `(secret)` as a !!float"},
		{"list instead of a map", head + "  secrets:\n  - hunter2\n", []string{"hunter2"}, "csi.secrets: line 5: want a mapping of names to strings; got a list"},
		{"aliased value", head + "  secrets: &s pw=hunter2\n  parameters: *s\n", []string{"hunter2"}, "csi.secrets: line 4: want a mapping of names to strings; got a string"},
		{"recursive alias", head + "  secrets: &s\n    pw: *s\n", nil, `csi.secrets["pw"]: line 5: want a string; got a mapping`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := ParseConnection("c.yaml", []byte(tt.doc), accessible.Options{Prefix: "p.example.com", Type: "zone"})
			if err == nil {
				t.Fatal("parsed")
			}
			for _, s := range tt.secrets {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error shows the secret %q: %v", s, err)
				}
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "file c.yaml: ") {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
	// Other values are still shown: they are what the admin must fix.
	_, _, err := ParseConnection("c.yaml", []byte(head+"  timeout: 5 minutes\n  secrets: {pw: hunter2}\n"), accessible.Options{Prefix: "p.example.com", Type: "zone"})
	if err == nil || !strings.Contains(err.Error(), `csi.timeout: line 4: want a duration with a unit, such as 30s or 2m; got a string ("5 minutes")`) {
		t.Errorf("timeout error %v does not show the bad value", err)
	}
}
