package csi_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/democratic-csi/proxy-topology/pkg/capability"
	"github.com/democratic-csi/proxy-topology/pkg/config"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
)

// TestRefreshWarnsCentralNodeLocal: a central controller learns of its
// node-local connections from the capability refresh (which reads every
// file anyway) and warns when they change: at the first refresh, not
// again while they stay the same, and again, naming both, when one is
// added at run time. A local-hostpath connection with topology (shared
// storage) is not node-local; without the option nothing is warned.
func TestRefreshWarnsCentralNodeLocal(t *testing.T) {
	for _, warn := range []bool{true, false} {
		policy, err := capability.NewPolicy(config.Capabilities{}, false)
		if err != nil {
			t.Fatal(err)
		}
		p := startProxy(t,
			func(o *pcsi.Options) { o.Mode, o.Policy, o.WarnCentralNodeLocal = pcsi.ModeController, &policy, warn })
		local := "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: " + t.TempDir() + "\n"
		p.write(t, "disk-b", local)
		p.write(t, "shared", local+"proxy:\n  perDriver:\n    topology:\n    - requirements: {zone: zone1}\n")
		warnings := func() []string {
			var out []string
			for _, line := range strings.Split(strings.TrimSpace(p.Logs.String()), "\n") {
				var rec map[string]any
				if json.Unmarshal([]byte(line), &rec) == nil && strings.HasPrefix(rec["msg"].(string), "node-local connections served by a central controller") {
					out = append(out, rec["connections"].(string)+"@"+rec["node_id"].(string))
				}
			}
			return out
		}
		ctx := context.Background()
		p.Driver.RefreshCapabilities(ctx)
		p.Driver.RefreshCapabilities(ctx)
		p.write(t, "disk-a", local)
		p.Driver.RefreshCapabilities(ctx)
		got := strings.Join(warnings(), " ")
		want := "disk-b@node-1 disk-a,disk-b@node-1"
		if !warn {
			want = ""
		}
		if got != want {
			t.Errorf("WarnCentralNodeLocal=%v: warnings %q, want %q", warn, got, want)
		}
	}
}
