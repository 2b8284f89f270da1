package hostpath

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
)

// IDs are derived from the CO's names so that a retried CreateVolume or
// CreateSnapshot finds the same ID without any lookup table, and two
// concurrent calls with the same name contend for the same lock. The hash
// also means nothing the CO chooses ever becomes part of a path.
const (
	volumeIDPrefix   = "vol-"
	snapshotIDPrefix = "snap-"
	// 128 bits of sha256 keep IDs short (the proxy prefixes them with
	// "v:<connection>/" and CSI caps IDs at 128 bytes) while collisions
	// stay out of reach.
	idHexLen = 32

	// maxIDBytes is the CSI limit for IDs and names.
	maxIDBytes = 128
)

var (
	// Every ID from a request is matched against these before it is used
	// to build a path, so "../x", "vol-../../etc", absolute paths or NUL
	// bytes can never escape BasePath.
	volumeIDRE   = regexp.MustCompile(`^vol-[0-9a-f]{32}$`)
	snapshotIDRE = regexp.MustCompile(`^snap-[0-9a-f]{32}$`)

	// driverNameRE is the CSI GetPluginInfo name rule.
	driverNameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)
)

func volumeIDFor(name string) string   { return volumeIDPrefix + nameHash(name) }
func snapshotIDFor(name string) string { return snapshotIDPrefix + nameHash(name) }

func nameHash(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:])[:idHexLen]
}

func validVolumeID(id string) bool   { return volumeIDRE.MatchString(id) }
func validSnapshotID(id string) bool { return snapshotIDRE.MatchString(id) }
