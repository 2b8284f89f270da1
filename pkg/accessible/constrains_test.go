package accessible

import "testing"

// TestDecisionConstrains: a decision constrains a key only when every one
// of its topologies requires it; everywhere constrains nothing. CreateVolume
// relies on it to tell a volume pinned to nodes from a wider one (SPEC §8).
func TestDecisionConstrains(t *testing.T) {
	const key = "p/node"
	tests := []struct {
		name string
		d    Decision
		want bool
	}{
		{"everywhere", Decision{}, false},
		{"pinned", Pinned(key, "n1"), true},
		{"every topology names a node", decision([]map[string]string{{key: "n1"}, {key: "n2", "p/zone": "z1"}}), true},
		{"one topology is a whole zone", decision([]map[string]string{{key: "n1"}, {"p/zone": "z1"}}), false},
		{"another key only", Pinned("p/zone", "z1"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.d.Constrains(key); got != tt.want {
				t.Errorf("Constrains(%q) = %t, want %t", key, got, tt.want)
			}
		})
	}
}
