package sanitytest

import (
	"context"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// provisionerRequirements is a client interceptor for csi-sanity's
// connection that gives a CreateVolume without accessibility requirements
// the ones the external-provisioner sends for a driver with
// VOLUME_ACCESSIBILITY_CONSTRAINTS: the topology the node reports in
// NodeGetInfo, as requisite and preferred (a WaitForFirstConsumer claim on
// that node, or an Immediate one in a one-node cluster). csi-sanity sends
// requirements only in a few specs; a Kubernetes CO always sends them to
// such a driver, and under nodeTopology.type node the proxy keeps an
// upstream's own topology only for a volume pinned to a node the request
// names (SPEC §8). A request that has requirements is left as it is.
func provisionerRequirements(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if create, ok := req.(*csi.CreateVolumeRequest); ok && create.GetAccessibilityRequirements() == nil {
		info, err := csi.NewNodeClient(cc).NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
		if err != nil {
			return err
		}
		if t := info.GetAccessibleTopology(); t != nil {
			// A copy: csi-sanity keeps its request, and the next call
			// must find it as it was.
			c := proto.Clone(create).(*csi.CreateVolumeRequest)
			c.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: []*csi.Topology{t}, Preferred: []*csi.Topology{t}}
			req = c
		}
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}
