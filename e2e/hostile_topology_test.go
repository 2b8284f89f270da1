package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

// TestHostileNodeTopologyRules starts node plugins whose rules meet a
// catastrophically backtracking regex, a huge file, a FIFO, a device and
// missing sources. Each rule fails or is skipped on its own, with the
// reason; start-up takes seconds, not forever; the process answers Probe;
// NodeGetInfo fails with FAILED_PRECONDITION naming every rule when nothing
// is left, and reports the fallback rule's segment when one matches.
func TestHostileNodeTopologyRules(t *testing.T) {
	dir := newTestDir(t)
	host := filepath.Join(dir, "host")
	huge := filepath.Join(host, "huge")
	testkit.WriteFile(t, huge, strings.Repeat("zone1\n", 200<<10), 0o640) // 1.2 MiB
	fifo := filepath.Join(host, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	device := filepath.Join(host, "device")
	if err := os.Symlink("/dev/zero", device); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(host, "missing")
	// ECMAScript (a+)+b against a run of a's without the b: exponential
	// backtracking, which only the match timeout ends.
	nodeName := strings.Repeat("a", 40)

	rules := fmt.Sprintf(`    - topologyKey: zone
      source: nodeName
      regex: "(a+)+b"
    - topologyKey: zone
      source: file
      file: %s
    - topologyKey: zone
      source: file
      file: %s
    - topologyKey: zone
      source: file
      file: %s
    - topologyKey: zone
      source: file
      file: %s
    - topologyKey: zone
      source: env
      envName: PT_E2E_UNSET
`, huge, fifo, device, missing)
	config := func(name, extra string) string {
		p := filepath.Join(dir, "config", name+".yaml")
		testkit.WriteFile(t, p, fmt.Sprintf("driver: proxy\nproxy:\n  configFolder: %s\n  nodeTopology:\n    type: zone\n    prefix: %s\n    fromRegexp:\n%s%s",
			filepath.Join(dir, "connections"), prefix, rules, extra), 0o640)
		return p
	}
	wantReasons := []string{
		"rule 0 (" + zoneKey + " from nodeName): error: match timed out after 100ms",
		"rule 1 (" + zoneKey + " from file " + huge + "): error: cannot read file " + huge + ": file is larger than the 64 KiB limit",
		"rule 2 (" + zoneKey + " from file " + fifo + "): error: cannot read file " + fifo + ": not a regular file (mode p",
		"rule 3 (" + zoneKey + " from file " + device + "): error: cannot read file " + device + ": not a regular file (mode Dc",
		"rule 4 (" + zoneKey + " from file " + missing + "): skipped: file " + missing + " does not exist",
		"rule 5 (" + zoneKey + " from env PT_E2E_UNSET): skipped: env PT_E2E_UNSET is not set",
	}

	tests := []struct {
		name  string
		extra string
		want  map[string]string // nil: NodeGetInfo fails
	}{
		{name: "nothing left", want: nil},
		{name: "fallback rule", extra: "    - topologyKey: zone\n      source: nodeName\n      regex: \"(a{1,8}).*\"\n      template: \"zone-{match:1}\"\n",
			want: map[string]string{zoneKey: "zone-aaaaaaaa"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			p := startProcess(t, dir, processSpec{name: fmt.Sprintf("node-%d", i), mode: "node", nodeID: nodeName,
				config: config(fmt.Sprintf("node-%d", i), tt.extra)})
			if d := time.Since(start); d > 15*time.Second {
				t.Errorf("start-up took %v", d)
			}
			n := csi.NewNodeClient(p.conn)
			for range 3 { // evaluated once at start-up: every call is the same and fast
				start := time.Now()
				info, err := n.NodeGetInfo(callCtx(t), &csi.NodeGetInfoRequest{})
				if d := time.Since(start); d > 2*time.Second {
					t.Errorf("NodeGetInfo took %v", d)
				}
				if tt.want != nil {
					if err != nil {
						t.Fatal(err)
					}
					if d := cmp.Diff(tt.want, info.GetAccessibleTopology().GetSegments()); d != "" {
						t.Errorf("segments (-want +got):\n%s", d)
					}
					continue
				}
				st := status.Convert(err)
				if st.Code() != codes.FailedPrecondition {
					t.Fatalf("got %v %q, want FailedPrecondition", st.Code(), st.Message())
				}
				for _, w := range wantReasons {
					if !strings.Contains(st.Message(), w) {
						t.Errorf("message %q does not contain %q", st.Message(), w)
					}
				}
				if len(st.Message()) > 4<<10 {
					t.Errorf("message is %d bytes", len(st.Message()))
				}
			}
			resp, err := csi.NewIdentityClient(p.conn).Probe(callCtx(t), &csi.ProbeRequest{})
			if err != nil || !resp.GetReady().GetValue() {
				t.Errorf("Probe = %v, %v", resp, err)
			}
		})
	}
}
