package main

import (
	"fmt"

	"github.com/democratic-csi/proxy-topology/pkg/ids"
)

// idRoomWarn is the room for upstream handles, in bytes, below which check
// warns: real drivers' handles reach 123 bytes (democratic-csi's filecopy
// snapshots), and UUID-based ones 40 to 80.
const idRoomWarn = 100

// checkIDRoom warns when a connection's name leaves little room for the
// upstream's handles inside the CSI limit of 128 bytes (or
// proxy.maxIdLength when set): every ID is "<kind>:<name>/<handle>"
// (SPEC §5).
func checkIDRoom(r *checkResult, name string, maxIDLength int) {
	if len(r.errors) > 0 {
		return
	}
	limit, what := ids.MaxLength, "are returned anyway (proxy.maxIdLength is unset), warned about and counted in proxy_topology_long_ids_total"
	if maxIDLength > 0 {
		limit, what = maxIDLength, fmt.Sprintf("are refused (proxy.maxIdLength: %d): CreateVolume and CreateSnapshot fail and delete what the upstream made", maxIDLength)
	}
	room := limit - 3 - len(name)
	if room >= idRoomWarn {
		return
	}
	r.warnings = append(r.warnings, fmt.Sprintf(
		"the connection name is %d bytes, which leaves %d bytes for upstream handles within %d: IDs of longer handles (democratic-csi's snapshot handles are 123 bytes) %s; a shorter name leaves more room",
		len(name), room, limit, what))
}
