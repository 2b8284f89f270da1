package nodetopology

import (
	"io/fs"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestResultErr(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		in   Inputs
		want string // status message; "" means Err() is nil
	}{
		{
			name: "cluster always has a segment",
			cfg:  Config{},
		},
		{
			name: "zone with one matching rule",
			cfg:  zoneRules(Rule{TopologyKey: "zone", Source: SourceNodeName}),
			in:   Inputs{NodeName: "n1"},
		},
		{
			name: "zone where nothing yields",
			cfg: zoneRules(
				Rule{TopologyKey: "zone", Source: SourceEnv, EnvName: "ZONE"},
				Rule{TopologyKey: "zone", Source: SourceFile, File: "/etc/zone"},
				Rule{TopologyKey: "zone", Source: SourceNodeName, Regex: `(\w+)-\d+`, Template: "{match:1}"},
				Rule{TopologyKey: "topology.kubernetes.io/region", Source: SourceNodeLabel, Label: "region"},
				Rule{TopologyKey: "rack", Source: SourceHostname, Template: "rack {match:0}"},
			),
			in: Inputs{
				NodeName: "worker",
				Hostname: "h1",
				Files:    map[string]FileInput{"/etc/zone": {Err: &fs.PathError{Op: "stat", Path: "/etc/zone", Err: fs.ErrNotExist}}},
			},
			want: "node reports no topology segment (type zone adds no base segment); " +
				"rule 0 (org.democratic-csi.topology/zone from env ZONE): skipped: env ZONE is not set; " +
				"rule 1 (org.democratic-csi.topology/zone from file /etc/zone): skipped: file /etc/zone does not exist; " +
				`rule 2 (org.democratic-csi.topology/zone from nodeName): skipped: regex did not match "worker"; ` +
				"rule 3 (topology.kubernetes.io/region from nodeLabel region): skipped: no label source configured; " +
				`rule 4 (org.democratic-csi.topology/rack from hostname): error: rendered value "rack h1" is not a valid label value: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`,
		},
		{
			name: "node whose name is not a label value",
			cfg:  Config{Type: TypeNode, FromRegexp: []Rule{{TopologyKey: "zone", Source: SourceEnv, EnvName: "ZONE"}}},
			in:   Inputs{NodeName: "Node_"},
			want: `node reports no topology segment; base segment (org.democratic-csi.topology/node from type node): error: node name "Node_" is not a valid label value: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?'); ` +
				"rule 0 (org.democratic-csi.topology/zone from env ZONE): skipped: env ZONE is not set",
		},
		{
			name: "node with a broken base but a matching rule",
			cfg:  Config{Type: TypeNode, FromRegexp: []Rule{{TopologyKey: "zone", Source: SourceEnv, EnvName: "ZONE"}}},
			in:   Inputs{NodeName: "Node_", Env: map[string]string{"ZONE": "z1"}},
		},
		{
			name: "node without rules",
			cfg:  Config{Type: TypeNode},
			want: "node reports no topology segment; base segment (org.democratic-csi.topology/node from type node): error: node name is not known; no proxy.nodeTopology.fromRegexp rules are configured",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := mustCompile(t, tt.cfg).Evaluate(tt.in).Err()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Err() = %v, want nil", err)
				}
				return
			}
			st, ok := status.FromError(err)
			if !ok {
				t.Fatalf("Err() = %v, want a gRPC status", err)
			}
			if st.Code() != codes.FailedPrecondition {
				t.Errorf("code = %v, want FailedPrecondition", st.Code())
			}
			if st.Message() != tt.want {
				t.Errorf("message:\n got %s\nwant %s", st.Message(), tt.want)
			}
		})
	}
}

func TestZeroResultErr(t *testing.T) {
	err := Result{}.Err()
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Err() = %v, want FailedPrecondition", err)
	}
}

func TestRuleResultString(t *testing.T) {
	tests := []struct {
		rr   RuleResult
		want string
	}{
		{RuleResult{Index: 2, Key: "a/zone", Source: "env ZONE", Value: "z1", Status: StatusMatched}, `rule 2 (a/zone from env ZONE): matched "z1"`},
		{RuleResult{Index: 1, Key: "a/zone", Source: "nodeName", Status: StatusShadowed, Reason: "key already set by rule 0"}, "rule 1 (a/zone from nodeName): shadowed: key already set by rule 0"},
		{RuleResult{Index: BaseIndex, Key: "a/cluster", Source: "type cluster", Value: "local", Status: StatusMatched}, `base segment (a/cluster from type cluster): matched "local"`},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.rr.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}
