// Package hostpath is the built-in local-hostpath CSI driver: one directory
// per volume under a base path, bind-mounted on publish, with snapshots and
// clones made by copying directory trees.
//
// The same Driver serves the proxy in process (called directly, see
// pkg/upstream), runs standalone as a separate upstream process, and is the csi-sanity
// target, so it follows the CSI spec to the letter rather than only doing what
// Kubernetes happens to call.
//
// Layout under Options.BasePath (nothing else is ever written):
//
//	meta/journal/<gen>.log      the volume journal: creates, expansions, deletes
//	meta/volumes/<id>.json      volume records folded out of the journal
//	volumes/<volume id>/        data of one volume; the bind-mount source,
//	                            made at first use for an empty volume
//	meta/made/<id>              that directory was made
//	snapshots/<snapshot id>/    copy of a volume taken by CreateSnapshot
//	meta/snapshots/<id>.json    snapshot record
//	meta/attachments/<id>.json  ControllerPublish records of one volume
//	meta/basepath.json          the base path's marker (marker.go)
//	meta/journal.lock           the journal's lease: one writer per base path
//	tmp/<instance>/             work in progress of one running Driver
//
// A volume exists exactly when the records folder with the journal
// replayed over it says so (index.go); a change of a volume is durable
// when its call returns: its entry is appended to the journal and synced,
// one fdatasync shared by concurrent callers (journal.go). A snapshot
// exists exactly when its record exists: data is built in tmp and renamed
// into place before the record, a delete removes the record before the
// data; its create is durable when it returns (sync.go), its delete is
// not synced. The next Driver that starts alone on the same BasePath
// folds the journal into the records and cleans up what an interrupted
// call left (recover.go). The invariants are in docs/reliability.md §10.
package hostpath

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"k8s.io/mount-utils"
)

// Options configure a Driver. Zero values are documented per field.
type Options struct {
	// DriverName is returned by GetPluginInfo. Required; it must be a valid
	// CSI driver name (at most 63 characters, alphanumerics, '-', '_', '.').
	DriverName string
	// Version is returned by GetPluginInfo. Empty reports "unknown".
	Version string
	// NodeID is returned by NodeGetInfo. Required, because the CO cannot
	// register a node without one.
	NodeID string
	// BasePath is the directory that holds all volumes, snapshots and their
	// records (the connection's shareBasePath). Required and absolute,
	// without spaces, tabs, newlines or backslashes; it is created with
	// mode 0750 when missing.
	BasePath string
	// Stage advertises STAGE_UNSTAGE_VOLUME: NodeStageVolume bind-mounts the
	// volume directory on staging_target_path and NodePublishVolume binds
	// from there. False: the Stage RPCs return UNIMPLEMENTED and publish
	// binds the volume directory directly.
	Stage bool
	// ControllerPublish advertises PUBLISH_UNPUBLISH_VOLUME (plus
	// PUBLISH_READONLY and LIST_VOLUMES_PUBLISHED_NODES, which come for free
	// with the attachment records): attachments are recorded per node id.
	// Nothing needs attaching for a local directory, so this exists to
	// exercise a real peer that has the capability. False: the RPCs return
	// UNIMPLEMENTED.
	ControllerPublish bool
	// Shared says BasePath is shared storage that other nodes reach too
	// (a proxy connection that declares where it is reachable, in
	// proxy.perDriver.topology). Such a driver cannot know the cluster's
	// nodes, so ControllerPublishVolume accepts any node id. False: the
	// storage is node-local, the only node is NodeID, and any other node_id
	// is NOT_FOUND (SPEC §12).
	Shared bool
	// Connection names the proxy connection the driver serves, written
	// into the base path's marker when the driver is the first to open it
	// (marker.go); empty outside the proxy.
	Connection string
	// MaxVolumesPerNode is reported by NodeGetInfo and, with
	// ControllerPublish, enforced per node id. Zero means no limit;
	// negative is invalid.
	MaxVolumesPerNode int64
	// Mounter, if set, makes and reads every mount instead of the system
	// calls and the kernel's mount table: mount-utils' FakeMounter in
	// tests that check what the node service decides, not the mount
	// itself (they then run without root). nil: the real mounts.
	Mounter mount.Interface
	// Logger receives one line per state change. Nil uses slog.Default().
	Logger *slog.Logger
}

// Validate checks the options without touching the file system. Errors name
// the offending field.
func (o Options) Validate() error {
	var errs []error
	switch {
	case o.DriverName == "":
		errs = append(errs, errors.New("DriverName is required"))
	case !driverNameRE.MatchString(o.DriverName):
		errs = append(errs, fmt.Errorf("DriverName %q is not a valid CSI driver name (at most 63 characters, alphanumerics, '-', '_' or '.', beginning and ending with an alphanumeric)", o.DriverName))
	}
	if o.NodeID == "" {
		errs = append(errs, errors.New("NodeID is required"))
	} else if len(o.NodeID) > maxIDBytes {
		errs = append(errs, fmt.Errorf("NodeID is %d bytes long, CSI allows at most %d", len(o.NodeID), maxIDBytes))
	}
	switch {
	case o.BasePath == "":
		errs = append(errs, errors.New("BasePath is required"))
	case !filepath.IsAbs(o.BasePath):
		errs = append(errs, fmt.Errorf("BasePath %q must be an absolute path", o.BasePath))
	case strings.ContainsAny(o.BasePath, mountTableSpecial):
		// The mount table escapes these, and mount-utils' GetMountRefs
		// would then never find the mounts of a volume (see mountsOf).
		errs = append(errs, fmt.Errorf("BasePath %q must not contain a space, tab, newline or backslash", o.BasePath))
	}
	if o.MaxVolumesPerNode < 0 {
		errs = append(errs, fmt.Errorf("MaxVolumesPerNode %d must not be negative", o.MaxVolumesPerNode))
	}
	return errors.Join(errs...)
}

// Driver is the local-hostpath CSI driver. It implements csi.IdentityServer,
// csi.ControllerServer and csi.NodeServer; it is safe for concurrent use.
type Driver struct {
	// The Unimplemented servers answer, with UNIMPLEMENTED, the RPCs this
	// driver deliberately does not support (ControllerModifyVolume, ...) and
	// any RPC a future CSI version adds.
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	opts  Options
	log   *slog.Logger
	store *store
	// marker is the base path's marker: its fingerprint is in the handle
	// of every volume made here (marker.go).
	marker  *marker
	locks   *keyedLocks
	mounter *mounter
}

var (
	_ csi.IdentityServer   = (*Driver)(nil)
	_ csi.ControllerServer = (*Driver)(nil)
	_ csi.NodeServer       = (*Driver)(nil)
)

// New validates opts, creates the directory layout under BasePath and removes
// work left in tmp by Drivers that are no longer running.
func New(opts Options) (*Driver, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("local-hostpath options: %w", err)
	}
	opts.BasePath = filepath.Clean(opts.BasePath)
	if opts.Version == "" {
		opts.Version = "unknown"
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("driver", "local-hostpath", "basePath", opts.BasePath)

	st, err := openStore(opts.BasePath, log)
	if err != nil {
		return nil, fmt.Errorf("local-hostpath BasePath: %w", err)
	}
	m, created, err := ensureMarker(opts.BasePath, opts.Connection)
	if err != nil {
		st.close()
		return nil, fmt.Errorf("local-hostpath BasePath marker: %w", err)
	}
	if created && opts.Connection != "" {
		// A new base path of a connection whose volumes live elsewhere:
		// its shareBasePath changed. Those volumes are refused by
		// fingerprint (volumeID); this says so before the first call.
		for _, o := range InspectBasePath(opts.BasePath, opts.Connection).Elsewhere {
			log.Warn("a new base path for a connection whose volumes are under another one: they are not reachable here, and calls on them fail with FAILED_PRECONDITION; see docs/operations.md, \"Moving a connection's storage\"",
				"connection", opts.Connection, "other_base_path", o.Path, "volumes", o.Volumes)
		}
	}
	return &Driver{
		opts:    opts,
		log:     log,
		store:   st,
		marker:  m,
		locks:   newKeyedLocks(),
		mounter: newMounter(opts.Mounter),
	}, nil
}

// Register registers the Identity, Controller and Node services on s.
func (d *Driver) Register(s *grpc.Server) {
	csi.RegisterIdentityServer(s, d)
	csi.RegisterControllerServer(s, d)
	csi.RegisterNodeServer(s, d)
}

// Close releases the Driver's claim on its tmp directory. A Driver must not
// be used after Close. Calling it is optional: the claim is a file lock that
// the kernel drops when the process exits.
func (d *Driver) Close() error {
	return d.store.close()
}

// ensureDir creates dir (and parents) with mode perm when missing and fails
// when something that is not a directory is in the way.
func ensureDir(dir string, perm os.FileMode) error {
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	return nil
}
