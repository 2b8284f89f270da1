package connection

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/democratic-csi/proxy-topology/pkg/accessible"
)

// TestNodeLocalNames: a local-hostpath connection without topology is
// node-local, and so is a csi connection whose upstreamTopology maps to
// the node key (SPEC §13); one with topology (a shared base path), a
// plain or zonal csi connection and a broken file are not listed. Nothing is loaded or cached.
func TestNodeLocalNames(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"disk":   "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: /var/lib/pt/disk\n",
		"shared": "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: /mnt/nfs/pt\nproxy:\n  perDriver:\n    topology:\n    - requirements: {zone: z1}\n",
		"nfs":    "driver: csi\ncsi:\n  endpoint: unix:///csi/nfs.sock\n",
		"broken": "driver: local-hostpath\nlocal-hostpath: [\n",
		"disk2":  "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: /var/lib/pt/disk2\n",
		"dcsi":   "driver: csi\ncsi:\n  endpoint: unix:///csi/dcsi.sock\nproxy:\n  perDriver:\n    upstreamTopology: {org.democratic-csi.topology/node: node}\n",
		"zonal":  "driver: csi\ncsi:\n  endpoint: unix:///csi/zonal.sock\nproxy:\n  perDriver:\n    upstreamTopology: {fake.example.com/zone: zone}\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := NewStore(Options{Folder: dir, Topology: accessible.Options{Prefix: "p"}, Log: slog.New(slog.DiscardHandler)})
	defer s.Close()
	if got, want := s.NodeLocalNames(), []string{"dcsi", "disk", "disk2"}; !slices.Equal(got, want) {
		t.Errorf("NodeLocalNames = %v, want %v", got, want)
	}
	if n := s.Cached(); n != 0 {
		t.Errorf("%d connections cached after NodeLocalNames, want 0", n)
	}
	if IsNodeLocal(nil, accessible.Options{}) {
		t.Error("IsNodeLocal(nil, accessible.Options{}) = true")
	}
}
