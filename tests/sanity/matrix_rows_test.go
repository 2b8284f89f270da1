package sanitytest

import (
	csi "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/democratic-csi/proxy-topology/internal/testupstream"
)

// matrixRow is one upstream of the conformance matrix: a test driver that
// behaves, in one way that matters to the proxy, like a real driver does,
// and how the proxy is configured in front of it.
type matrixRow struct {
	name string
	// profile is the test driver; profile.StandsFor names the real
	// driver and where its behaviour was read.
	profile testupstream.Profile
	// stage turns on local-hostpath's STAGE_UNSTAGE_VOLUME.
	stage bool
	// nodeTopologyType is the proxy's nodeTopology.type; empty is cluster.
	nodeTopologyType string
	// connectionExtra is appended to the connection file (a proxy: block).
	connectionExtra string
	// controllerPublish turns on local-hostpath's ControllerPublish and
	// the proxy's proxy.controllerPublish.
	controllerPublish bool
	// hungNeighbour adds a second connection, "hung", whose upstream
	// accepts connections and never answers, with a 1s csi.timeout.
	hungNeighbour bool
	// skips apply to both runs, each with its reason.
	skips []SkipSpec
	// upstreamFails are the specs the driver fails on its own (directly),
	// with why. The direct run must fail exactly these.
	upstreamFails []SkipSpec
	// proxyDeviations are specs that fail through the proxy, not directly,
	// because docs/spec.md requires the proxy to refuse what the driver does;
	// message is a part of the failure message that shows the refusal.
	// An entry that does not fail so fails the row.
	proxyDeviations []deviation
	// proxySkips are specs that pass directly and are skipped through the
	// proxy, each with why. Any other such spec fails the row (the proxy
	// would be hiding a capability), and so does an entry that is not
	// skipped so.
	proxySkips []SkipSpec
}

// storageHealthSkip is declared by every row whose driver advertises
// GET_STORAGE_HEALTH.
var storageHealthSkip = SkipSpec{"NodeGetStorageHealth should return appropriate response",
	"the proxy does not advertise GET_STORAGE_HEALTH (CSI 1.13): NodeGetStorageHealth names no volume, so there is no connection to route it to"}

type deviation struct {
	SkipSpec
	message string
}

var (
	hideGetAndHealth = []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_GET_VOLUME,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY,
		csi.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH,
		csi.ControllerServiceCapability_RPC_LIST_VOLUME_HEALTH,
	}
	hideNodeHealth = []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
		csi.NodeServiceCapability_RPC_GET_STORAGE_HEALTH,
	}
)

// matrixRows are the upstreams. Each differs from the proxy's own
// local-hostpath in one dimension a real driver differs in; the real
// drivers were read from their sources (commits named).
var matrixRows = []matrixRow{
	{
		name: "no-snapshots",
		profile: testupstream.Profile{
			StandsFor: "csi-driver-smb (pkg/smb/smb.go @95c6968: controller CREATE_DELETE_VOLUME, SINGLE_NODE_MULTI_WRITER, " +
				"CLONE_VOLUME, EXPAND_VOLUME; node STAGE_UNSTAGE_VOLUME, GET_VOLUME_STATS; plugin CONTROLLER_SERVICE only)",
			HideController: append([]csi.ControllerServiceCapability_RPC_Type{
				csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
				csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
				csi.ControllerServiceCapability_RPC_GET_SNAPSHOT,
				csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
			}, hideGetAndHealth...),
			HideNode:          append([]csi.NodeServiceCapability_RPC_Type{csi.NodeServiceCapability_RPC_EXPAND_VOLUME}, hideNodeHealth...),
			NoVolumeExpansion: true,
		},
		stage: true,
	},
	{
		name: "no-expansion",
		profile: testupstream.Profile{
			StandsFor: "csi-driver-host-path --enable-volume-expansion=false (pkg/hostpath @1f2b2e6: no EXPAND_VOLUME in " +
				"controller or node capabilities, no VolumeExpansion plugin capability)",
			HideController:    []csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_EXPAND_VOLUME},
			HideNode:          []csi.NodeServiceCapability_RPC_Type{csi.NodeServiceCapability_RPC_EXPAND_VOLUME},
			NoVolumeExpansion: true,
		},
		stage:      true,
		proxySkips: []SkipSpec{storageHealthSkip},
	},
	{
		name: "no-list-no-stage",
		profile: testupstream.Profile{
			StandsFor: "csi-driver-nfs (pkg/nfs @d3b27c0: controller CREATE_DELETE_VOLUME, SINGLE_NODE_MULTI_WRITER, CLONE_VOLUME, " +
				"CREATE_DELETE_SNAPSHOT, EXPAND_VOLUME; ListVolumes, ListSnapshots, GetCapacity, ControllerGetVolume UNIMPLEMENTED; " +
				"node GET_VOLUME_STATS, SINGLE_NODE_MULTI_WRITER, no staging)",
			HideController: append([]csi.ControllerServiceCapability_RPC_Type{
				csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
				csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
				csi.ControllerServiceCapability_RPC_GET_SNAPSHOT,
			}, hideGetAndHealth...),
			HideNode:          append([]csi.NodeServiceCapability_RPC_Type{csi.NodeServiceCapability_RPC_EXPAND_VOLUME}, hideNodeHealth...),
			NoVolumeExpansion: true,
		},
	},
	{
		name: "node-only",
		profile: testupstream.Profile{
			StandsFor: "democratic-csi node-manual (src/driver/node-manual/index.js @8a4a28a: no CONTROLLER_SERVICE, empty " +
				"controller capabilities, every controller RPC UNIMPLEMENTED; node STAGE_UNSTAGE_VOLUME, GET_VOLUME_STATS, " +
				"SINGLE_NODE_MULTI_WRITER; no volume expansion)",
			NodeOnly:          true,
			HideNode:          append([]csi.NodeServiceCapability_RPC_Type{csi.NodeServiceCapability_RPC_EXPAND_VOLUME}, hideNodeHealth...),
			NoVolumeExpansion: true,
		},
		stage: true,
		upstreamFails: []SkipSpec{
			{"ValidateVolumeCapabilities should fail when no volume id is provided", "node-manual answers every controller RPC UNIMPLEMENTED"},
			{"ValidateVolumeCapabilities should fail when no volume capabilities are provided", "the spec creates a volume first; node-manual has no CreateVolume"},
			{"ValidateVolumeCapabilities should return appropriate values (no optional values added)", "the spec creates a volume first; node-manual has no CreateVolume"},
			{"ValidateVolumeCapabilities should fail when the requested volume does not exist", "node-manual answers every controller RPC UNIMPLEMENTED"},
			// csi-sanity creates a volume for these even without a
			// controller service.
			{"NodeGetVolumeStats should fail when volume does not exist on the specified path", "the spec creates a volume first; node-manual has no CreateVolume"},
			{"should fail when volume with single node single writer access mode is already mounted at a different target path", "the spec creates a volume first; node-manual has no CreateVolume"},
			{"NodeStageVolume should fail when no volume capability is provided", "the spec creates a volume first; node-manual has no CreateVolume"},
			{"NodeUnpublishVolume should remove target path", "the spec creates a volume first; node-manual has no CreateVolume"},
		},
	},
	{
		name: "own-topology",
		profile: testupstream.Profile{
			StandsFor: "csi-driver-host-path with its default --enable-topology (pkg/hostpath @1f2b2e6: VOLUME_ACCESSIBILITY_CONSTRAINTS; " +
				"every volume and NodeGetInfo carry {topology.hostpath.csi/node: <node id>})",
			TopologyKey: "topology.hostpath.csi/node",
		},
		stage:      true,
		proxySkips: []SkipSpec{storageHealthSkip},
		// The driver's volumes live on one node, and it says so in its own
		// key: the connection maps that key to the proxy's node key (SPEC
		// §13), so the connection is node-local and every volume is pinned
		// to the node (the proxy and the driver share the node id
		// sanity-node). csi-sanity's requests reach the proxy as it sends
		// them. What the real external-provisioner sends a node-local
		// connection is covered in e2e-kube for the built-in driver
		// (TestNodeLocalProvisioning), whose placement a mapped upstream
		// shares (accessible.Placement); a mapped node-local upstream is
		// checked with such requests in pkg/csi
		// (TestUpstreamTopologyNodeLocal).
		connectionExtra: "proxy:\n  perDriver:\n    upstreamTopology: {topology.hostpath.csi/node: node}\n",
	},
	{
		name: "own-topology-declared",
		profile: testupstream.Profile{
			StandsFor:   "csi-driver-host-path with its default --enable-topology (as own-topology), behind a connection that declares where it is reachable, nodeTopology.type cluster",
			TopologyKey: "topology.hostpath.csi/node",
		},
		stage:      true,
		proxySkips: []SkipSpec{storageHealthSkip},
		// Type cluster: the upstream's own topology is accepted because
		// the connection declares where its storage is (SPEC §8), and the
		// volumes get that, never the upstream's key.
		connectionExtra: "proxy:\n  perDriver:\n    topology:\n    - requirements: {cluster: local}\n",
	},
	{
		name: "long-ids",
		profile: testupstream.Profile{
			StandsFor: "democratic-csi filecopy snapshots (src/driver/controller-client-common: snapshot_id " +
				"\"snapshot_driver=filecopy&snapshot_id=<volume id>-<name>\", 123 bytes for Kubernetes names) and ceph-csi " +
				"volume handles (version, cluster id, pool id, UUID): volume and snapshot IDs of 120 bytes",
			IDLength: 120,
		},
		stage:      true,
		proxySkips: []SkipSpec{storageHealthSkip},
	},
	{
		name: "endless-paging",
		profile: testupstream.Profile{
			StandsFor: "vsphere-csi-driver between PR 2051 and its fix, PR 2077 (kubernetes-sigs/vsphere-csi-driver: ListVolumes " +
				"handed back starting token 15 again and again): next_token never ends a listing",
			EndlessPaging: true,
		},
		stage:           true,
		proxySkips:      []SkipSpec{storageHealthSkip},
		proxyDeviations: endlessPagingDeviations,
	},
	{
		name: "stops-answering",
		profile: testupstream.Profile{
			StandsFor: "a neighbour that stops answering: the connection under test is local-hostpath; a second connection's " +
				"driver accepts connections and never answers (csi-driver-nfs's controller blocked on a hard NFS mount whose " +
				"server is gone); csi-sanity cannot run against that driver itself (it sets no deadlines)",
		},
		stage:           true,
		proxySkips:      []SkipSpec{storageHealthSkip},
		hungNeighbour:   true,
		proxyDeviations: unreachableListingDeviations,
	},
	{
		name: "attach",
		profile: testupstream.Profile{
			StandsFor: "aws-ebs-csi-driver's attach step (pkg/driver/controller.go @429e202: PUBLISH_UNPUBLISH_VOLUME, " +
				"a volume is attached to a node id before NodeStageVolume), behind proxy.controllerPublish",
		},
		stage:             true,
		proxySkips:        []SkipSpec{storageHealthSkip},
		controllerPublish: true,
	},
	{
		name: "modify",
		profile: testupstream.Profile{
			StandsFor: "aws-ebs-csi-driver's ControllerModifyVolume (pkg/driver/controller.go @429e202: MODIFY_VOLUME; volume id " +
				"required; an empty mutable_parameters map is accepted; an unknown key is INVALID_ARGUMENT, in CreateVolume too)",
			ModifyKeys: []string{"iops", "throughput", "type"},
		},
		stage:      true,
		proxySkips: []SkipSpec{storageHealthSkip},
	},
}

// endlessPagingDeviations: csi-sanity reads one page of a listing, so the
// driver alone passes; the proxy follows next_token to merge connections
// and must cut off an upstream that pages without end with an error naming
// it (SPEC §6). Every spec that lists all snapshots or volumes through the
// proxy fails so, by design; a listing filtered by snapshot or source
// volume id goes to one connection and hands the upstream's next_token to
// the CO, which pages on its own (those specs pass).
var endlessPagingDeviations = func() []deviation {
	const why = "SPEC §6: an upstream that repeats next_token is cut off with an error naming it; csi-sanity reads one page, so the driver alone passes"
	var out []deviation
	for _, spec := range []string{
		"ListVolumes should return appropriate values (no optional values added)",
		"ListVolumes check the presence of new volumes and absence of deleted ones in the volume list",
		"ListSnapshots [Controller Server] should return appropriate values (no optional values added)",
		"ListSnapshots [Controller Server] check the presence of new snapshots in the snapshot list",
		"ListSnapshots [Controller Server] should return next token when a limited number of entries are requested",
	} {
		out = append(out, deviation{SkipSpec{spec, why}, "the upstream pages without end, so the listing stops"})
	}
	return out
}()

// unreachableListingDeviations: a listing covers every connection, and the
// proxy fails it, naming the connection, when one upstream cannot be
// reached (pkg/csi fanOut; docs/operations.md, "Listings"): a list without
// that upstream's volumes would read as "these volumes are gone" to the
// external-attacher. Every other spec, all routed to the healthy
// connection, passes as directly.
var unreachableListingDeviations = func() []deviation {
	const why = "an unreachable upstream fails the whole listing, naming it, rather than shortening it (SPEC §6, decided in pkg/csi fanOut)"
	var out []deviation
	for _, spec := range []string{
		"ListVolumes should return appropriate values (no optional values added)",
		"ListVolumes check the presence of new volumes and absence of deleted ones in the volume list",
		"ControllerListVolumeHealth [Controller Server] should return appropriate response",
		"ListSnapshots [Controller Server] should return appropriate values (no optional values added)",
		"ListSnapshots [Controller Server] check the presence of new snapshots in the snapshot list",
		"ListSnapshots [Controller Server] should return next token when a limited number of entries are requested",
	} {
		out = append(out, deviation{SkipSpec{spec, why}, `connection "hung"`})
	}
	return out
}()
