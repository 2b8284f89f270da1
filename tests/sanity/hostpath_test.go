package sanitytest

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"golang.org/x/sys/unix"

	"github.com/democratic-csi/proxy-topology/internal/testbin"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
)

// The local-hostpath driver is checked in three shapes, each a separate
// sanity run because each advertises different capabilities:
//   - local-hostpath: staging on, no ControllerPublish (the embedded default)
//   - local-hostpath-nostage: NodePublish binds the volume directly
//   - local-hostpath-publish: ControllerPublish on, with an attach limit
//
// Specs skipped in all of them, by csi-test itself, because the driver does
// not advertise the capability they need:
//   - ControllerModifyVolume / mutable parameters: no MODIFY_VOLUME
//     (nothing about a directory can be modified).
//   - GroupController / VolumeGroupSnapshots: no GROUP_CONTROLLER_SERVICE.
//   - CreateSnapshot with accessibility requirements: no
//     SNAPSHOT_ACCESSIBILITY_CONSTRAINTS (and no node topology; the proxy
//     owns topology).
//   - ListVolumes "pagination should detect volumes added between pages":
//     pending (XIt) in csi-test itself.
//   - Without ControllerPublish: every ControllerPublish/Unpublish and
//     "volume lifecycle" spec (no PUBLISH_UNPUBLISH_VOLUME, nor
//     PUBLISH_READONLY) and the attach-limit spec.
//   - Without Stage: the NodeStage/NodeUnstage specs.

func TestSanityLocalHostpath(t *testing.T) {
	t.Parallel()
	runSanity(t, "local-hostpath", hostpathConfig(t, hostpath.Options{Stage: true}))
}

func TestSanityLocalHostpathNoStage(t *testing.T) {
	t.Parallel()
	runSanity(t, "local-hostpath-nostage", hostpathConfig(t, hostpath.Options{}))
}

func TestSanityLocalHostpathPublish(t *testing.T) {
	t.Parallel()
	cfg := hostpathConfig(t, hostpath.Options{Stage: true, ControllerPublish: true, MaxVolumesPerNode: 3})
	cfg.TestNodeVolumeAttachLimit = true
	runSanity(t, "local-hostpath-publish", cfg)
}

// hostpathConfig serves a local-hostpath driver on a unix socket in a temp
// dir and returns the sanity config for it. In the parent process of
// runSanity it only returns a config (nothing would use the server).
func hostpathConfig(t *testing.T, opts hostpath.Options) sanity.TestConfig {
	t.Helper()
	cfg := sanity.NewTestConfig()
	if os.Getenv(childTargetEnv) == "" {
		return cfg
	}
	// Checked in the child, so the parent reports the skip (runSanity).
	testbin.RequireRoot(t, "local-hostpath sanity needs root: the driver bind-mounts volumes")
	dir := t.TempDir()
	t.Cleanup(func() { unmountBelow(t, dir) }) // runs after the server stops

	opts.DriverName = "hostpath.sanity.proxy-topology"
	opts.Version = "sanity"
	opts.NodeID = "sanity-node"
	opts.BasePath = filepath.Join(dir, "base")
	opts.Logger = slog.New(slog.DiscardHandler)
	d, err := hostpath.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "csi.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := pcsi.NewServer(d, opts.Logger)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)

	cfg.Address = "unix://" + sock
	cfg.TargetPath = filepath.Join(dir, "target")
	cfg.StagingPath = filepath.Join(dir, "staging")
	cfg.TestVolumeSize = 64 << 20
	cfg.TestVolumeExpandSize = 128 << 20
	cfg.IDGen = hostpathIDs{}
	return cfg
}

// hostpathIDs makes "valid" IDs in local-hostpath's own format, so that the
// not-found specs reach the record lookup instead of stopping at the ID
// pattern check.
type hostpathIDs struct{ sanity.DefaultIDGenerator }

func (hostpathIDs) GenerateUniqueValidVolumeID() string {
	var b [16]byte
	rand.Read(b[:])
	return "vol-" + hex.EncodeToString(b[:])
}

// unmountBelow detaches anything still mounted under dir, so that a failing
// spec does not also leave mounts that make t.TempDir's cleanup fail.
func unmountBelow(t *testing.T, dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			points = append(points, fields[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		t.Logf("left mounted by the suite: %s", points[i])
		if err := unix.Unmount(points[i], unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", points[i], err)
		}
	}
}
