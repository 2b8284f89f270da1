package metrics_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
)

// TestRemovedConnectionSeries: once a connection's file is gone, the next
// scrape has none of its series (calls, upstream calls, loads), the other
// connections' series stay, and a call still naming it counts as
// (unknown), as for a name that never had a file; a file of that name
// brings the label back.
func TestRemovedConnectionSeries(t *testing.T) {
	p := startProxy(t, -1)
	for _, name := range []string{"gone", "kept"} {
		p.write(t, name, "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: "+t.TempDir()+"\n")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	create := func(conn string, want codes.Code) {
		t.Helper()
		_, err := p.controller.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-" + conn, Parameters: map[string]string{"connection": conn}, VolumeCapabilities: []*csi.VolumeCapability{testkit.RWO()}})
		testkit.WantCode(t, err, want)
	}
	create("gone", codes.OK)
	create("kept", codes.OK)
	series := func(label string) []string {
		t.Helper()
		body := get(t, p.scrape.URL+"/metrics", 200)
		var out []string
		for _, line := range strings.Split(body, "\n") {
			if strings.Contains(line, `connection="`+label+`"`) {
				out = append(out, line[:strings.LastIndexByte(line, ' ')])
			}
		}
		return out
	}
	for _, name := range []string{"gone", "kept"} {
		if got := strings.Join(series(name), "\n"); !strings.Contains(got, "proxy_topology_csi_requests_total{") ||
			!strings.Contains(got, "proxy_topology_upstream_requests_total{") || !strings.Contains(got, "proxy_topology_connection_loads_total{") {
			t.Fatalf("connection %q lacks call, upstream or load series:\n%s", name, got)
		}
	}
	before := len(series("kept"))

	if err := os.Remove(filepath.Join(p.folder, "gone.yaml")); err != nil {
		t.Fatal(err)
	}
	if got := series("gone"); len(got) != 0 {
		t.Errorf("series of a removed connection are still exported:\n%s", strings.Join(got, "\n"))
	}
	if got := len(series("kept")); got != before {
		t.Errorf("connection kept has %d series after another was removed, %d before", got, before)
	}
	create("gone", codes.FailedPrecondition)
	if got, unknown := series("gone"), series("(unknown)"); len(got) != 0 || len(unknown) == 0 {
		t.Errorf("a call naming the removed connection: series %q, (unknown) series %q; want none, and some", got, unknown)
	}

	p.write(t, "gone", "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: "+t.TempDir()+"\n")
	create("gone", codes.OK)
	if got := strings.Join(series("gone"), "\n"); !strings.Contains(got, `proxy_topology_csi_requests_total{code="OK",connection="gone",method="CreateVolume"}`) {
		t.Errorf("a file of the removed name does not bring its label back:\n%s", got)
	}
}
