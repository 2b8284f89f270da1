package config

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLoadMainConfigSecret(t *testing.T) {
	l, err := loadMain("proxy:\n  configSecret: proxy-topology/connections\n")
	if err != nil {
		t.Fatal(err)
	}
	if l.Proxy.ConfigSecret != "proxy-topology/connections" || l.Proxy.ConfigFolder != "" {
		t.Errorf("Proxy = %+v", l.Proxy)
	}
	// The deployment's controller switches a shared config to the Secret
	// with env overrides.
	l, err = loadMain(minimal, EnvPrefix+"PROXY__CONFIGSECRET=ns/conn", EnvPrefix+"PROXY__CONFIGFOLDER=")
	if err != nil {
		t.Fatal(err)
	}
	if l.Proxy.ConfigSecret != "ns/conn" || l.Proxy.ConfigFolder != "" {
		t.Errorf("Proxy after env = %+v", l.Proxy)
	}
}

func TestLoadMainConfigSecretErrors(t *testing.T) {
	long := "a"
	for len(long) < 64 {
		long += "a"
	}
	for _, tc := range []struct {
		name, yml string
		want      []string
	}{
		{"neither", "proxy: {}\n", []string{"proxy.configFolder: required for driver: proxy"}},
		{"both", "proxy:\n  configFolder: /c\n  configSecret: ns/conn\n",
			[]string{"proxy.configSecret: set together with proxy.configFolder; connections come from one of them"}},
		{"no namespace", "proxy:\n  configSecret: conn\n", []string{`proxy.configSecret: "conn": want <namespace>/<name>`}},
		{"three parts", "proxy:\n  configSecret: a/b/c\n", []string{`proxy.configSecret: "a/b/c": want <namespace>/<name>`}},
		{"empty name", "proxy:\n  configSecret: ns/\n", []string{`proxy.configSecret: "ns/": secret name "" must be 1 to 253 characters`}},
		{"upper-case namespace", "proxy:\n  configSecret: NS/conn\n",
			[]string{`proxy.configSecret: "NS/conn": namespace "NS" is not a valid namespace name (lowercase alphanumerics and '-', at most 63)`}},
		{"long namespace", "proxy:\n  configSecret: " + long + "/conn\n",
			[]string{`proxy.configSecret: "` + long + `/conn": namespace "` + long + `" is not a valid namespace name (lowercase alphanumerics and '-', at most 63)`}},
		{"bad name", "proxy:\n  configSecret: ns/conn_x\n",
			[]string{`proxy.configSecret: "ns/conn_x": secret name "conn_x" is not a valid DNS subdomain (lowercase alphanumerics, '-' and '.')`}},
		{"dotted name is fine, empty label is not", "proxy:\n  configSecret: ns/a..b\n",
			[]string{`proxy.configSecret: "ns/a..b": secret name "a..b" is not a valid DNS subdomain (lowercase alphanumerics, '-' and '.')`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadMain(tc.yml)
			if diff := cmp.Diff(tc.want, mainErrors(t, err)); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := loadMain("proxy:\n  configSecret: ns/a.b-c\n"); err != nil {
		t.Errorf("dotted secret name: %v", err)
	}
}
