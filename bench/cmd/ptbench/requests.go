package main

import (
	"context"
	"fmt"

	csi "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/democratic-csi/proxy-topology/bench/load"
)

var (
	mountCap = []*csi.VolumeCapability{{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}}
	// requirement is what the external-provisioner sends for a
	// WaitForFirstConsumer claim in strict mode: the selected node's
	// topology as both requisite and preferred.
	requirement = &csi.TopologyRequirement{
		Requisite: []*csi.Topology{{Segments: map[string]string{prefix + "/zone": zone}}},
		Preferred: []*csi.Topology{{Segments: map[string]string{prefix + "/zone": zone}}},
	}
)

// createRequest is a CreateVolume as the external-provisioner sends it
// (with --extra-create-metadata). Every path gets the same request, so the
// same bytes; servers other than proxy-topology ignore the connection.
func createRequest(name, conn string) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{
		Name:               name,
		CapacityRange:      &csi.CapacityRange{RequiredBytes: 1 << 30},
		VolumeCapabilities: mountCap,
		Parameters: map[string]string{
			"connection":                       conn,
			"csi.storage.k8s.io/pvc/name":      "data-postgres-0",
			"csi.storage.k8s.io/pvc/namespace": "default",
			"csi.storage.k8s.io/pv/name":       name,
			"csi.storage.k8s.io/fstype":        "ext4",
		},
		AccessibilityRequirements: requirement,
	}
}

// createVolume calls CreateVolume on p with a distinct name per call; tag
// keeps names distinct between paths.
func createVolume(p *proc, tag int, conn func(i int) string) load.Call {
	c := csi.NewControllerClient(p.conn)
	return func(ctx context.Context, i int) error {
		_, err := c.CreateVolume(ctx, createRequest(fmt.Sprintf("pvc-%08x-7c1e-4b5a-9d2f-%012x", tag, i), conn(i)))
		return err
	}
}

// statsRequest asks about the benchmark volume: through the proxy as
// v:<conn>/<handle>, directly and through the forwarders as the bare
// handle.
func statsRequest(conn string) *csi.NodeGetVolumeStatsRequest {
	id := handle
	if conn != "" {
		id = "v:" + conn + "/" + handle
	}
	return &csi.NodeGetVolumeStatsRequest{
		VolumeId:   id,
		VolumePath: "/var/lib/kubelet/pods/0d5e2a7c-1f3b-4e8a-b6c9-7a2d4f1e3b5c/volumes/kubernetes.io~csi/" + handle + "/mount",
	}
}

func volumeStats(p *proc, conn string) load.Call {
	c := csi.NewNodeClient(p.conn)
	req := statsRequest(conn)
	return func(ctx context.Context, _ int) error {
		_, err := c.NodeGetVolumeStats(ctx, req)
		return err
	}
}

func probe(p *proc) load.Call {
	c := csi.NewIdentityClient(p.conn)
	return func(ctx context.Context, _ int) error {
		resp, err := c.Probe(ctx, &csi.ProbeRequest{})
		if err == nil && !resp.GetReady().GetValue() {
			err = fmt.Errorf("%s is not ready", p.name)
		}
		return err
	}
}
