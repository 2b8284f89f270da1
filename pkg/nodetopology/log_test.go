package nodetopology

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestLogRuleErrorsAtWarn: a rule whose regexp times out, one whose
// rendered value is no label value and one whose file cannot be read are
// each logged at warn with the rule's index and key; a rule that does not
// match, one whose source is absent and one that matched stay at debug
// (SPEC §7), so at the default level only the errors show.
func TestLogRuleErrorsAtWarn(t *testing.T) {
	e := mustCompile(t, Config{Type: TypeCluster, FromRegexp: []Rule{
		{TopologyKey: "zone", Source: SourceEnv, EnvName: "ZONE", Regex: `(a+)+b`},
		{TopologyKey: "rack", Source: SourceNodeName, Regex: `(.*)`, Template: "rack {match:1}!"},
		{TopologyKey: "region", Source: SourceFile, File: "/etc/region"},
		{TopologyKey: "row", Source: SourceNodeName, Regex: `row-(\d+)`},
		{TopologyKey: "room", Source: SourceEnv, EnvName: "ROOM"},
		{TopologyKey: "site", Source: SourceNodeName},
	}})
	res := e.Evaluate(Inputs{
		NodeName: "n1",
		Env:      map[string]string{"ZONE": strings.Repeat("a", 5000)},
		Files:    map[string]FileInput{"/etc/region": {Err: errors.New("permission denied")}},
	})
	var info, debug bytes.Buffer
	res.Log(slog.New(slog.NewTextHandler(&info, &slog.HandlerOptions{Level: slog.LevelInfo})))
	res.Log(slog.New(slog.NewTextHandler(&debug, &slog.HandlerOptions{Level: slog.LevelDebug})))

	lines := strings.Split(strings.TrimSpace(info.String()), "\n")
	want := []string{
		`level=WARN msg="node topology rule failed: the node does not report its key from this rule" index=0 key=org.democratic-csi.topology/zone source="env ZONE" status=error reason="match timed out after 100ms"`,
		`level=WARN msg="node topology rule failed: the node does not report its key from this rule" index=1 key=org.democratic-csi.topology/rack source=nodeName status=error reason="rendered value \"rack n1!\" is not a valid label value`,
		`level=WARN msg="node topology rule failed: the node does not report its key from this rule" index=2 key=org.democratic-csi.topology/region source="file /etc/region" status=error reason="cannot read file /etc/region: permission denied"`,
	}
	if len(lines) != len(want) {
		t.Fatalf("at info, %d lines, want %d:\n%s", len(lines), len(want), info.String())
	}
	for i, w := range want {
		if _, after, ok := strings.Cut(lines[i], " "); !ok || !strings.HasPrefix(after, w) {
			t.Errorf("line %d:\n got %s\nwant %s…", i, lines[i], w)
		}
	}
	for _, w := range []string{
		`level=DEBUG msg="node topology rule" index=base key=org.democratic-csi.topology/cluster source="type cluster" status=matched value=local`,
		`level=DEBUG msg="node topology rule" index=3 key=org.democratic-csi.topology/row source=nodeName status=skipped reason="regex did not match \"n1\""`,
		`level=DEBUG msg="node topology rule" index=4 key=org.democratic-csi.topology/room source="env ROOM" status=skipped reason="env ROOM is not set"`,
		`level=DEBUG msg="node topology rule" index=5 key=org.democratic-csi.topology/site source=nodeName status=matched value=n1`,
	} {
		if !strings.Contains(debug.String(), w) {
			t.Errorf("at debug, no line %s in:\n%s", w, debug.String())
		}
	}
}
