package migrate

import "slices"

// kind is what the chart's democraticCsi preset does with a democratic-csi
// driver (deploy/helm/proxy-topology/templates/_upstreams.tpl,
// proxy-topology.dcsiKind): the host mounts and options of its node
// container. The table must name the same drivers as the chart's; a test
// renders every kind through the chart.
type kind string

const (
	kindISCSI         kind = "iscsi"
	kindNVMeoF        kind = "nvmeof"
	kindZFSLocal      kind = "zfs-local"
	kindLocalHostpath kind = "local-hostpath"
	kindNFS           kind = "nfs"
	kindSMB           kind = "smb"
	kindLustre        kind = "lustre"
	kindUnsupported   kind = "unsupported"
)

var driverKinds = map[string]kind{
	"freenas-iscsi": kindISCSI, "truenas-iscsi": kindISCSI, "freenas-api-iscsi": kindISCSI,
	"synology-iscsi": kindISCSI, "zfs-generic-iscsi": kindISCSI,
	"zfs-generic-nvmeof": kindNVMeoF,
	"zfs-local-dataset":  kindZFSLocal, "zfs-local-zvol": kindZFSLocal,
	"local-hostpath": kindLocalHostpath,
	"freenas-nfs":    kindNFS, "truenas-nfs": kindNFS, "freenas-api-nfs": kindNFS,
	"synology-nfs": kindNFS, "zfs-generic-nfs": kindNFS, "nfs-client": kindNFS,
	"freenas-smb": kindSMB, "truenas-smb": kindSMB, "freenas-api-smb": kindSMB,
	"synology-smb": kindSMB, "zfs-generic-smb": kindSMB, "smb-client": kindSMB,
	"lustre-client":              kindLustre,
	"zfs-local-ephemeral-inline": kindUnsupported,
	"objectivefs":                kindUnsupported,
	"node-manual":                kindUnsupported,
}

// unsupportedWhy says why a driver cannot run as an upstream of the proxy.
// The first two are the incompatible drivers of democratic-csi's own proxy
// compatibility notes; node-manual is refused by the chart as well.
var unsupportedWhy = map[string]string{
	"zfs-local-ephemeral-inline": "it serves inline ephemeral volumes, which are never made with CreateVolume, so no volume handle can name the connection (democratic-csi's proxy lists it as incompatible)",
	"objectivefs":                "its NodeStageVolume reads the driver config, which the node side of a proxy does not have per connection (democratic-csi's proxy lists it as incompatible)",
	"node-manual":                "it makes no volumes: its PVs are written by hand with its own driver name, so keep it in a deployment of its own",
}

// nodeLocal reports whether volumes of the kind live on the disk of the
// node whose controller made them, answered in democratic-csi's node key.
func (k kind) nodeLocal() bool { return k == kindLocalHostpath || k == kindZFSLocal }

// dcsiNodeKey is the key democratic-csi's local-hostpath and zfs-local-*
// answer accessible_topology in (NODE_TOPOLOGY_KEY_NAME in their
// controllers), whatever the proxy's prefix is.
const dcsiNodeKey = "org.democratic-csi.topology/node"

// KnownDrivers lists the democratic-csi drivers migrate knows, sorted.
func KnownDrivers() []string {
	var out []string
	for d := range driverKinds {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}
