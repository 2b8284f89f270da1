package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func runArgs(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestHelpEverywhere: every command answers -h and --help with its help
// on stdout and exit 0, and documents itself and each of its flags.
func TestHelpEverywhere(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		path := strings.Fields(c.CommandPath())[1:]
		t.Run(strings.Join(append([]string{"root"}, path...), " "), func(t *testing.T) {
			if c.Short == "" || c.Long == "" || c.Example == "" {
				t.Errorf("%s lacks a Short, a Long or an Example", c.CommandPath())
			}
			c.LocalFlags().VisitAll(func(f *pflag.Flag) {
				if f.Usage == "" {
					t.Errorf("%s --%s has no usage", c.CommandPath(), f.Name)
				}
			})
			for _, h := range []string{"-h", "--help"} {
				code, out, errOut := runArgs(append(path, h)...)
				if code != 0 || errOut != "" || !strings.Contains(out, "Usage:\n  "+c.CommandPath()) {
					t.Errorf("%s %s: exit %d\nstdout:\n%s\nstderr:\n%s", c.CommandPath(), h, code, out, errOut)
				}
			}
		})
		for _, sub := range c.Commands() {
			if sub.Name() != "help" {
				walk(sub)
			}
		}
	}
	walk(newRootCommand())
}

func TestVersion(t *testing.T) {
	want := buildVersion() + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}, {"-v"}} {
		if code, out, errOut := runArgs(args...); code != 0 || out != want || errOut != "" {
			t.Errorf("%v: exit %d, stdout %q (want %q), stderr %q", args, code, out, want, errOut)
		}
	}
}

// TestCommandLineMistakes: exit 2, the message naming the command, then
// its usage, all on stderr.
func TestCommandLineMistakes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"explode"}, `proxy-topology: unknown command "explode" for "proxy-topology"`},
		{[]string{"chek"}, "Did you mean this?\n\tcheck"},
		{[]string{"--nope"}, "proxy-topology: unknown flag: --nope\n\nUsage:\n  proxy-topology [flags]"},
		{[]string{"serve", "--nope"}, "proxy-topology serve: unknown flag: --nope\n\nUsage:\n  proxy-topology serve [flags]"},
		{[]string{"serve", "stray"}, `proxy-topology serve: unexpected argument "stray"`},
		{[]string{"topology", "--env", "NOEQUALS"}, `proxy-topology topology: --env "NOEQUALS": want K=V` + "\n\nUsage:"},
		{[]string{"version", "x"}, `proxy-topology version: unexpected argument "x"`},
		{[]string{"serve", "--shutdown-timeout", "soon"}, `invalid argument "soon" for "--shutdown-timeout" flag`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := runArgs(tc.args...)
			if code != 2 || out != "" || !strings.Contains(errOut, tc.msg) || !strings.Contains(errOut, "Usage:") {
				t.Errorf("exit %d (want 2)\nstdout:\n%s\nstderr (want %q and the usage):\n%s", code, out, tc.msg, errOut)
			}
		})
	}
}

// TestServeIsTheDefault: without a command the root runs serve with
// serve's flags, as the manifests in deploy/ call it. A wrong value exits 2
// before anything starts, the message naming the flag. (e2e's
// TestCLIServesWithoutCommand serves that way.)
func TestServeIsTheDefault(t *testing.T) {
	for _, args := range [][]string{
		{"--mode", "bogus"},
		{"serve", "--mode", "bogus"},
		{"--mode=bogus", "--csi-endpoint=unix:///nonexistent/csi.sock"},
	} {
		code, _, errOut := runArgs(args...)
		if code != 2 || !strings.Contains(errOut, `--mode "bogus": want all, controller or node`) {
			t.Errorf("%v: exit %d\n%s", args, code, errOut)
		}
	}
	code, _, errOut := runArgs("--log-level", "loud")
	if code != 2 || !strings.HasPrefix(errOut, `proxy-topology: --log-level "loud": want debug, info, warn or error`) {
		t.Errorf("--log-level loud: exit %d\n%s", code, errOut)
	}
}

// TestPprofFlagIsHidden: --pprof-address is accepted (bench/ uses it) but
// not shown in the help.
func TestPprofFlagIsHidden(t *testing.T) {
	for _, path := range [][]string{nil, {"serve"}} {
		_, out, _ := runArgs(append(path, "--help")...)
		if strings.Contains(out, "pprof") {
			t.Errorf("%v --help shows the pprof flag:\n%s", path, out)
		}
		code, _, errOut := runArgs(append(path, "--node-id", "n", "--pprof-address", "127.0.0.1:99999")...)
		if code != 2 || !strings.Contains(errOut, "--pprof-address: listen tcp") {
			t.Errorf("%v --pprof-address: exit %d\n%s", path, code, errOut)
		}
	}
}
