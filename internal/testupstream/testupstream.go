// Package testupstream serves CSI drivers that differ from the proxy's own
// local-hostpath the way real drivers differ from it: fewer capabilities,
// no controller service, their own accessible_topology, long IDs, paging
// without end, or no answer at all. The conformance matrix
// (tests/sanity/matrix_test.go) runs csi-sanity against each of them
// directly and through the proxy.
//
// Every profile is the built-in local-hostpath driver (pkg/hostpath, which
// passes csi-sanity on its own) behind one gRPC interceptor that changes
// only what the profile names: the capabilities advertised, UNIMPLEMENTED
// for the RPCs of a capability it does not advertise (as csi-driver-nfs and
// democratic-csi's node-manual answer them), IDs, topology, list tokens. So
// a difference between the direct run and the run through the proxy is the
// proxy's, not the test driver's.
package testupstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
)

// Profile says how a test driver differs from local-hostpath. The zero
// Profile is local-hostpath itself.
type Profile struct {
	// StandsFor names the real driver whose behaviour the profile copies,
	// and where that behaviour was read (printed with the matrix).
	StandsFor string

	// HideController lists controller capabilities the driver does not
	// advertise; their RPCs answer UNIMPLEMENTED. Only capabilities that
	// gate whole RPCs may be listed (see controllerRPCs).
	HideController []csi.ControllerServiceCapability_RPC_Type
	// HideNode is HideController for node capabilities. Staging is not
	// hidden here but turned off in the driver (hostpath.Options.Stage).
	HideNode []csi.NodeServiceCapability_RPC_Type
	// NoVolumeExpansion drops the VolumeExpansion plugin capability (the
	// EXPAND_VOLUME RPC capabilities are hidden separately: csi-driver-nfs
	// and csi-driver-smb advertise controller expansion without it).
	NoVolumeExpansion bool
	// NodeOnly drops the CONTROLLER_SERVICE plugin capability: the
	// controller service answers ControllerGetCapabilities with an empty
	// list and every other controller RPC with UNIMPLEMENTED (democratic-csi
	// node-manual).
	NodeOnly bool

	// TopologyKey, when set, makes the driver report where its volumes
	// are: VOLUME_ACCESSIBILITY_CONSTRAINTS, NodeGetInfo's
	// accessible_topology and every volume's accessible_topology are
	// {TopologyKey: node id} (csi-driver-host-path with its default
	// --enable-topology).
	TopologyKey string

	// IDLength, when non-zero, pads every volume and snapshot ID the driver
	// hands out to exactly this many bytes (and strips the padding from
	// the IDs it is sent); see longIDs.
	IDLength int

	// EndlessPaging makes ListVolumes and ListSnapshots never end a
	// listing: where local-hostpath returns no next_token, the driver
	// returns EndlessToken, which starts the listing again.
	EndlessPaging bool

	// ModifyKeys, when non-nil, adds MODIFY_VOLUME: ControllerModifyVolume
	// and CreateVolume's mutable_parameters accept these keys and refuse
	// any other with INVALID_ARGUMENT; an empty map is accepted and
	// modifies nothing (aws-ebs-csi-driver's rule).
	ModifyKeys []string

	// Hang makes a driver that accepts connections and never answers any
	// call (its handlers stuck, as on a hard NFS mount whose server is
	// gone). Every other field is ignored.
	Hang bool
}

// VolumeID returns the ID this driver hands out for the local-hostpath
// volume or snapshot ID id: id itself, or id padded to IDLength.
func (p Profile) VolumeID(id string) string { return longIDs{length: p.IDLength}.pad(id) }

// EndlessToken is the next_token an EndlessPaging driver returns at the
// end of a listing; as a starting_token it lists from the beginning.
const EndlessToken = "again"

// controllerRPCs maps the controller capabilities a profile may hide to the
// RPCs they gate.
var controllerRPCs = map[csi.ControllerServiceCapability_RPC_Type][]string{
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME:     {"CreateVolume", "DeleteVolume"},
	csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME: {"ControllerPublishVolume", "ControllerUnpublishVolume"},
	csi.ControllerServiceCapability_RPC_LIST_VOLUMES:             {"ListVolumes"},
	csi.ControllerServiceCapability_RPC_GET_CAPACITY:             {"GetCapacity"},
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT:   {"CreateSnapshot", "DeleteSnapshot"},
	csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS:           {"ListSnapshots"},
	csi.ControllerServiceCapability_RPC_GET_SNAPSHOT:             {"GetSnapshot"},
	csi.ControllerServiceCapability_RPC_EXPAND_VOLUME:            {"ControllerExpandVolume"},
	csi.ControllerServiceCapability_RPC_GET_VOLUME:               {"ControllerGetVolume"},
	csi.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH:        {"ControllerGetVolumeHealth"},
	csi.ControllerServiceCapability_RPC_LIST_VOLUME_HEALTH:       {"ControllerListVolumeHealth"},
}

var nodeRPCs = map[csi.NodeServiceCapability_RPC_Type][]string{
	csi.NodeServiceCapability_RPC_GET_VOLUME_STATS:   {"NodeGetVolumeStats"},
	csi.NodeServiceCapability_RPC_EXPAND_VOLUME:      {"NodeExpandVolume"},
	csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH:  {"NodeGetVolumeHealth"},
	csi.NodeServiceCapability_RPC_GET_STORAGE_HEALTH: {"NodeGetStorageHealth"},
}

// Validate checks that every hidden capability gates RPCs this package
// knows how to refuse.
func (p Profile) Validate() error {
	var errs []error
	for _, c := range p.HideController {
		if _, ok := controllerRPCs[c]; !ok {
			errs = append(errs, fmt.Errorf("HideController: %s gates no whole RPC; it cannot be hidden", c))
		}
	}
	for _, c := range p.HideNode {
		if _, ok := nodeRPCs[c]; !ok {
			errs = append(errs, fmt.Errorf("HideNode: %s gates no whole RPC; it cannot be hidden (staging: use hostpath.Options.Stage)", c))
		}
	}
	if p.IDLength != 0 && p.IDLength < minIDLength {
		errs = append(errs, fmt.Errorf("IDLength %d is shorter than local-hostpath's own IDs plus a separator (%d)", p.IDLength, minIDLength))
	}
	return errors.Join(errs...)
}

// Server is a running test driver.
type Server struct {
	// Endpoint is the driver's address, unix:///path/to/csi.sock.
	Endpoint string

	srv *grpc.Server
	drv *hostpath.Driver
}

// Start serves a test driver with profile p on the unix socket sock. opts
// configure the local-hostpath driver inside (DriverName, NodeID and
// BasePath are required; Logger nil discards its lines). Stop it with
// Stop.
func Start(sock string, p Profile, opts hostpath.Options) (*Server, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(sock), 0o750); err != nil {
		return nil, err
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	s := &Server{Endpoint: "unix://" + sock}
	if p.Hang {
		s.srv = grpc.NewServer(grpc.UnknownServiceHandler(hang))
		go s.srv.Serve(lis)
		return s, nil
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	d, err := hostpath.New(opts)
	if err != nil {
		lis.Close()
		return nil, err
	}
	w := &wrapper{p: p, drv: d, nodeID: opts.NodeID, ids: longIDs{length: p.IDLength}}
	s.drv = d
	s.srv = grpc.NewServer(grpc.ChainUnaryInterceptor(w.intercept))
	d.Register(s.srv)
	go s.srv.Serve(lis)
	return s, nil
}

// Stop stops serving (a hung call is cancelled) and releases the driver.
func (s *Server) Stop() {
	s.srv.Stop()
	if s.drv != nil {
		s.drv.Close()
	}
}

// hang answers no call: it returns only when the caller gives up or the
// server stops.
func hang(_ any, stream grpc.ServerStream) error {
	<-stream.Context().Done()
	return status.FromContextError(stream.Context().Err()).Err()
}

// wrapper is the interceptor that turns local-hostpath into a profile.
type wrapper struct {
	p      Profile
	drv    *hostpath.Driver
	nodeID string
	ids    longIDs
}

func (w *wrapper) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := path.Base(info.FullMethod)
	if w.refuses(method) {
		return nil, status.Errorf(codes.Unimplemented, "%s is not supported by this driver", method)
	}
	req = w.ids.inbound(req)
	switch r := req.(type) {
	case *csi.ListVolumesRequest:
		if w.p.EndlessPaging && r.GetStartingToken() == EndlessToken {
			r.StartingToken = ""
		}
	case *csi.ListSnapshotsRequest:
		if w.p.EndlessPaging && r.GetStartingToken() == EndlessToken {
			r.StartingToken = ""
		}
	case *csi.ControllerModifyVolumeRequest:
		if w.p.ModifyKeys != nil {
			return w.modify(ctx, r)
		}
	case *csi.CreateVolumeRequest:
		if w.p.ModifyKeys != nil {
			if err := w.checkMutable(r.GetMutableParameters()); err != nil {
				return nil, err
			}
		}
	case *csi.ControllerGetCapabilitiesRequest:
		if w.p.NodeOnly {
			return &csi.ControllerGetCapabilitiesResponse{}, nil
		}
	}
	resp, err := handler(ctx, req)
	if err != nil {
		return nil, err
	}
	w.rewrite(resp)
	return w.ids.outbound(resp), nil
}

// refuses reports whether the profile lacks the capability method needs.
func (w *wrapper) refuses(method string) bool {
	if w.p.NodeOnly && isController(method) && method != "ControllerGetCapabilities" {
		return true
	}
	for _, c := range w.p.HideController {
		if slices.Contains(controllerRPCs[c], method) {
			return true
		}
	}
	for _, c := range w.p.HideNode {
		if slices.Contains(nodeRPCs[c], method) {
			return true
		}
	}
	return false
}

// controllerMethods are the RPCs of the Controller service.
var controllerMethods = func() map[string]bool {
	m := map[string]bool{}
	for _, md := range csi.Controller_ServiceDesc.Methods {
		m[md.MethodName] = true
	}
	return m
}()

func isController(method string) bool { return controllerMethods[method] }

// rewrite edits a local-hostpath answer into the profile's: capabilities,
// topology, the end of a listing.
func (w *wrapper) rewrite(resp any) {
	switch r := resp.(type) {
	case *csi.GetPluginCapabilitiesResponse:
		r.Capabilities = slices.DeleteFunc(r.Capabilities, func(c *csi.PluginCapability) bool {
			return w.p.NoVolumeExpansion && c.GetVolumeExpansion() != nil ||
				w.p.NodeOnly && c.GetService().GetType() == csi.PluginCapability_Service_CONTROLLER_SERVICE
		})
		if w.p.TopologyKey != "" {
			r.Capabilities = append(r.Capabilities, &csi.PluginCapability{Type: &csi.PluginCapability_Service_{
				Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS}}})
		}
	case *csi.ControllerGetCapabilitiesResponse:
		r.Capabilities = slices.DeleteFunc(r.Capabilities, func(c *csi.ControllerServiceCapability) bool {
			return slices.Contains(w.p.HideController, c.GetRpc().GetType())
		})
		if w.p.ModifyKeys != nil {
			r.Capabilities = append(r.Capabilities, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{
				Rpc: &csi.ControllerServiceCapability_RPC{Type: csi.ControllerServiceCapability_RPC_MODIFY_VOLUME}}})
		}
	case *csi.NodeGetCapabilitiesResponse:
		r.Capabilities = slices.DeleteFunc(r.Capabilities, func(c *csi.NodeServiceCapability) bool {
			return slices.Contains(w.p.HideNode, c.GetRpc().GetType())
		})
	case *csi.NodeGetInfoResponse:
		if w.p.TopologyKey != "" {
			r.AccessibleTopology = w.topology()[0]
		}
	case *csi.CreateVolumeResponse:
		w.placeVolume(r.GetVolume())
	case *csi.ControllerGetVolumeResponse:
		w.placeVolume(r.GetVolume())
	case *csi.ListVolumesResponse:
		for _, e := range r.GetEntries() {
			w.placeVolume(e.GetVolume())
		}
		if w.p.EndlessPaging && r.GetNextToken() == "" {
			r.NextToken = EndlessToken
		}
	case *csi.ListSnapshotsResponse:
		if w.p.EndlessPaging && r.GetNextToken() == "" {
			r.NextToken = EndlessToken
		}
	}
}

// topology is where every volume of a TopologyKey driver is: on its node.
func (w *wrapper) topology() []*csi.Topology {
	return []*csi.Topology{{Segments: map[string]string{w.p.TopologyKey: w.nodeID}}}
}

func (w *wrapper) placeVolume(v *csi.Volume) {
	if v != nil && w.p.TopologyKey != "" {
		v.AccessibleTopology = w.topology()
	}
}

// modify is ControllerModifyVolume by aws-ebs-csi-driver's rules: the
// volume id is required, every key must be one it knows, an empty map
// modifies nothing, and an unknown volume is NOT_FOUND.
func (w *wrapper) modify(ctx context.Context, req *csi.ControllerModifyVolumeRequest) (*csi.ControllerModifyVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	if err := w.checkMutable(req.GetMutableParameters()); err != nil {
		return nil, err
	}
	if _, err := w.drv.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: req.GetVolumeId()}); err != nil {
		return nil, err
	}
	return &csi.ControllerModifyVolumeResponse{}, nil
}

func (w *wrapper) checkMutable(params map[string]string) error {
	for k := range params {
		if !slices.Contains(w.p.ModifyKeys, k) {
			return status.Errorf(codes.InvalidArgument, "mutable parameter %q is not supported (supported: %v)", k, w.p.ModifyKeys)
		}
	}
	return nil
}
