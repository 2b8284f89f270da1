package csi_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/democratic-csi/proxy-topology/pkg/config"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
	"github.com/democratic-csi/proxy-topology/pkg/upstream"
)

// TestRefreshWarnsCentralNodeLocal: a central controller learns of its
// node-local connections from the capability refresh (which reads every
// file anyway) and warns when they change: at the first refresh, not
// again while they stay the same, and again, naming both, when one is
// added at run time. A local-hostpath connection with topology (shared
// storage) is not node-local; without the option nothing is warned.
func TestRefreshWarnsCentralNodeLocal(t *testing.T) {
	for _, warn := range []bool{true, false} {
		logs := &lockedBuffer{}
		log := jsonLogger(t, logs, "debug")
		folder := t.TempDir()
		pool := upstream.NewPool(log)
		t.Cleanup(pool.Close)
		store := connection.NewStore(connection.Options{Folder: folder, Topology: testTopology, Pool: pool, Log: log,
			DriverName: "proxy.example.com", NodeID: "node-1"})
		policy, err := pcsi.NewPolicy(config.Capabilities{}, false)
		if err != nil {
			t.Fatal(err)
		}
		d, err := pcsi.New(pcsi.Options{Name: "proxy.example.com", NodeID: "node-1", Mode: pcsi.ModeController, Store: store,
			Topology: testTopology, Log: log, Policy: &policy, WarnCentralNodeLocal: warn})
		if err != nil {
			t.Fatal(err)
		}
		write := func(name, body string) {
			if err := os.WriteFile(filepath.Join(folder, name+".yaml"), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		local := "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: " + t.TempDir() + "\n"
		write("disk-b", local)
		write("shared", local+"proxy:\n  perDriver:\n    topology:\n    - requirements: {zone: zone1}\n")
		warnings := func() []string {
			var out []string
			for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				var rec map[string]any
				if json.Unmarshal([]byte(line), &rec) == nil && strings.HasPrefix(rec["msg"].(string), "node-local connections served by a central controller") {
					out = append(out, rec["connections"].(string)+"@"+rec["node_id"].(string))
				}
			}
			return out
		}
		ctx := context.Background()
		d.RefreshCapabilities(ctx)
		d.RefreshCapabilities(ctx)
		write("disk-a", local)
		d.RefreshCapabilities(ctx)
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
