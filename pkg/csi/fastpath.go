package csi

import (
	"context"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/democratic-csi/proxy-topology/internal/protomap"
	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
	"github.com/democratic-csi/proxy-topology/pkg/ids"
	"github.com/democratic-csi/proxy-topology/pkg/upstream"
)

// The wire-level fast path serves CreateVolume and NodeGetVolumeStats
// without decoding and re-encoding whole messages: protobuf-go codes
// map<string,string> fields through reflection, with several allocations
// per entry, and that was most of the proxy's cost over a byte-forwarding
// proxy (docs/performance.md). The request is checked and read with
// protowire, the outbound request is the inbound bytes minus what the
// proxy removes, and the answer is edited the same way.
//
// Anything unusual goes to the typed handler, decoded as gRPC would have
// decoded it: unknown fields anywhere, a field of the wrong wire type,
// invalid UTF-8, a repeated accessibility_requirements, a content source.
// A connection's default parameters and secrets are added as map entries
// for the keys the request does not set (appendDefaults). The fast path
// only serves requests for which it gives the same answer, and sends the
// upstream the same request, as the typed handler (FuzzFastPathEquivalence).

// RegisterFastPath is Register with CreateVolume and NodeGetVolumeStats
// served by the wire-level fast path. The server must use ServerCodec.
func (d *Driver) RegisterFastPath(s *grpc.Server) {
	csi.RegisterIdentityServer(s, d)
	if d.opts.Mode != ModeNode {
		s.RegisterService(withMethod(&csi.Controller_ServiceDesc, "CreateVolume", d.createVolumeHandler), d)
	}
	if d.opts.Mode != ModeController {
		s.RegisterService(withMethod(&csi.Node_ServiceDesc, "NodeGetVolumeStats", d.nodeGetVolumeStatsHandler), d)
	}
}

// withMethod returns a copy of sd with one method's handler replaced.
func withMethod(sd *grpc.ServiceDesc, name string, h grpc.MethodHandler) *grpc.ServiceDesc {
	out := *sd
	out.Methods = append([]grpc.MethodDesc(nil), sd.Methods...)
	for i := range out.Methods {
		if out.Methods[i].MethodName == name {
			out.Methods[i].Handler = h
			return &out
		}
	}
	panic("csi: no method " + name + " in " + sd.ServiceName)
}

// wireMessage is a request or response the interceptor sees as bytes; it
// decodes it only to log it at debug level.
type wireMessage interface{ decoded() proto.Message }

// loggable is what the logging interceptor prints for m.
func loggable(m any) any {
	if w, ok := m.(wireMessage); ok {
		return w.decoded()
	}
	return m
}

// unmarshalError is the error gRPC returns for a request that does not
// decode (before any interceptor runs).
func unmarshalError(err error) error {
	return status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err)
}

// serve runs h under the interceptor, as a generated handler does.
func serve(ctx context.Context, srv any, method string, req any, interceptor grpc.UnaryServerInterceptor, h grpc.UnaryHandler) (any, error) {
	if interceptor == nil {
		return h(ctx, req)
	}
	return interceptor(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: method}, h)
}

// typed decodes b into m and serves it with the typed handler h, exactly as
// the generated handler would have.
func serveTyped[M proto.Message](ctx context.Context, srv any, method string, b []byte, m M, interceptor grpc.UnaryServerInterceptor,
	h func(context.Context, M) (proto.Message, error)) (any, error) {
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, unmarshalError(err)
	}
	return serve(ctx, srv, method, m, interceptor, func(ctx context.Context, req any) (any, error) {
		return h(ctx, req.(M))
	})
}

var (
	createVolumeRequestDesc        = wireTableOf((&csi.CreateVolumeRequest{}).ProtoReflect().Descriptor())
	createVolumeResponseDesc       = wireTableOf((&csi.CreateVolumeResponse{}).ProtoReflect().Descriptor())
	nodeGetVolumeStatsRequestDesc  = wireTableOf((&csi.NodeGetVolumeStatsRequest{}).ProtoReflect().Descriptor())
	nodeGetVolumeStatsResponseDesc = wireTableOf((&csi.NodeGetVolumeStatsResponse{}).ProtoReflect().Descriptor())
)

// field is one top-level field of a message that wireValid accepted.
type field struct {
	num  protowire.Number
	all  []byte // tag and value
	data []byte // the value of a length-delimited field
}

// nextField splits off the first field of a wireValid message.
func nextField(b []byte) (field, []byte) {
	num, typ, n := protowire.ConsumeTag(b)
	if typ == protowire.BytesType { // most fields: read the length once
		data, m := protowire.ConsumeBytes(b[n:])
		return field{num: num, all: b[:n+m], data: data}, b[n+m:]
	}
	m := protowire.ConsumeFieldValue(num, typ, b[n:])
	return field{num: num, all: b[:n+m]}, b[n+m:]
}

// topologyTerms splits a wireValid TopologyRequirement into its requisite
// and preferred terms, each the encoding of a csi.Topology, for matching
// without decoding the segment maps (accessible.Terms).
func topologyTerms(b []byte) (requisite, preferred accessible.Terms) {
	nReq, n := 0, 0
	for rest := b; len(rest) > 0; n++ {
		var f field
		f, rest = nextField(rest)
		if f.num == 1 {
			nReq++
		}
	}
	all := make([][]byte, n)
	r, p := 0, nReq
	for rest := b; len(rest) > 0; {
		var f field
		f, rest = nextField(rest)
		if f.num == 1 {
			all[r], r = f.data, r+1
		} else {
			all[p], p = f.data, p+1
		}
	}
	return accessible.Terms{Wire: all[:nReq:nReq]}, accessible.Terms{Wire: all[nReq:]}
}

// fastCreate is a CreateVolume request the fast path can serve.
type fastCreate struct {
	raw        []byte
	name       string
	caps       int
	connection string // the last "connection" parameter, "" if none
	topology   []byte // accessibility_requirements, nil if absent
	hasTopo    bool
	out        []byte // raw without the connection parameter and accessibility_requirements
}

func (r *fastCreate) decoded() proto.Message {
	m := &csi.CreateVolumeRequest{}
	_ = proto.Unmarshal(r.raw, m)
	return m
}

// parseCreateVolume reads b for the fast path; ok=false sends it to the
// typed handler.
func parseCreateVolume(b []byte) (*fastCreate, bool) {
	if !wireValid(b, createVolumeRequestDesc, 0) {
		return nil, false
	}
	// Room for a connection's default parameters, appended in place.
	r := &fastCreate{raw: b, out: make([]byte, 0, len(b)+256)}
	for rest := b; len(rest) > 0; {
		var f field
		f, rest = nextField(rest)
		switch f.num {
		case 1: // name; the last one wins
			r.name = string(f.data)
		case 3: // volume_capabilities
			r.caps++
		case 4: // parameters
			if k, v := protomap.Entry(f.data); string(k) == ConnectionParameter {
				r.connection = string(v)
				continue
			}
		case 6: // volume_content_source: IDs to unwrap
			return nil, false
		case 7: // accessibility_requirements; repeated ones merge
			if r.hasTopo {
				return nil, false
			}
			r.topology, r.hasTopo = f.data, true
			continue
		}
		r.out = append(r.out, f.all...)
	}
	return r, true
}

func (d *Driver) createVolumeHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := &rawMessage{}
	if err := dec(in); err != nil {
		return nil, err
	}
	r, ok := parseCreateVolume(in.b)
	if !ok {
		return serveTyped(ctx, srv, csi.Controller_CreateVolume_FullMethodName, in.b, &csi.CreateVolumeRequest{}, interceptor, d.createVolumeTyped)
	}
	return serve(ctx, srv, csi.Controller_CreateVolume_FullMethodName, r, interceptor, func(ctx context.Context, req any) (any, error) {
		return d.fastCreateVolume(ctx, req.(*fastCreate))
	})
}

func (d *Driver) createVolumeTyped(ctx context.Context, req *csi.CreateVolumeRequest) (proto.Message, error) {
	resp, err := d.CreateVolume(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp, nil
}

func newCreateVolumeResponse() proto.Message { return &csi.CreateVolumeResponse{} }

// fastCreateVolume is CreateVolume (controller.go) on the wire: the same
// checks in the same order, the same errors.
func (d *Driver) fastCreateVolume(ctx context.Context, r *fastCreate) (any, error) {
	if r.name == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	if r.caps == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume_capabilities are required")
	}
	c, err := d.connectionNamed(ctx, r.connection)
	if err != nil {
		return nil, err
	}
	out := r.out
	if len(c.Config.CSI.Parameters) > 0 || len(c.Config.CSI.Secrets) > 0 {
		out = appendDefaults(out, r.raw, c.Config.CSI.Parameters, c.Config.CSI.Secrets)
	}
	var requisite, preferred accessible.Terms
	if r.hasTopo {
		requisite, preferred = topologyTerms(r.topology)
	}
	topology, err := c.Topology(d.opts.Topology).Decide(c.Name, requisite, preferred)
	if err != nil {
		return nil, err
	}
	if err := requireController(ctx, c, csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, "CreateVolume"); err != nil {
		return nil, err
	}
	resp := &rawMessage{newMsg: newCreateVolumeResponse}
	if err := forwardRaw(ctx, c, c.Controller, csi.Controller_CreateVolume_FullMethodName, "CreateVolume", out, resp); err != nil {
		return nil, err
	}
	volumeID, out, ok := rewriteCreateVolumeResponse(resp.b, topology, c.Name)
	if !ok {
		return d.finishCreateTyped(ctx, c, r, resp.b, topology.Topologies())
	}
	if volumeID == "" {
		return nil, noVolumeID(c)
	}
	if out == nil { // the wrapped ID is too long
		_, err := ids.Encode(ids.Volume, c.Name, volumeID)
		return nil, d.deleteCreated(ctx, c, volumeID, r.secrets(c), err)
	}
	resp.b = out
	return resp, nil
}

// appendDefaults appends to out the connection's default parameters and
// secrets that the request (raw) does not set, which is what merge and
// mergeParameters give once decoded: the request's values win, and the
// connection parameter is never passed on. No key is sent twice.
func appendDefaults(out, raw []byte, parameters, secrets map[string]string) []byte {
	// One pass over the request notes which default keys it sets; the
	// usual request sets none or a few of them.
	var buf [8][]byte
	set := [2][][]byte{buf[:0:4], buf[4:4:8]}
	for rest := raw; len(rest) > 0; {
		var f field
		f, rest = nextField(rest)
		if f.num != 4 && f.num != 5 {
			continue
		}
		defaults := parameters
		if f.num == 5 {
			defaults = secrets
		}
		if k, _ := protomap.Entry(f.data); len(defaults) > 0 {
			if _, ok := defaults[string(k)]; ok {
				set[f.num-4] = append(set[f.num-4], k)
			}
		}
	}
	for k, v := range parameters {
		if k != ConnectionParameter && !containsKey(set[0], k) {
			out = protomap.AppendEntry(out, 4, k, v)
		}
	}
	for k, v := range secrets {
		if !containsKey(set[1], k) {
			out = protomap.AppendEntry(out, 5, k, v)
		}
	}
	return out
}

func containsKey(keys [][]byte, k string) bool {
	for _, key := range keys {
		if string(key) == k {
			return true
		}
	}
	return false
}

// secrets are the secrets the typed CreateVolume would have sent
// upstream, for a rollback's DeleteVolume.
func (c *fastCreate) secrets(conn *connection.Connection) map[string]string {
	typed := &csi.CreateVolumeRequest{}
	_ = proto.Unmarshal(c.raw, typed) // wireValid checked it
	return merge(conn.Config.CSI.Secrets, typed.GetSecrets())
}

// finishCreateTyped handles an upstream answer the fast path does not edit
// on the wire (unknown fields, a repeated volume, invalid bytes) as
// CreateVolume does after its call.
func (d *Driver) finishCreateTyped(ctx context.Context, c *connection.Connection, r *fastCreate, b []byte, topology []*csi.Topology) (any, error) {
	resp := &csi.CreateVolumeResponse{}
	if err := proto.Unmarshal(b, resp); err != nil {
		return nil, upstreamError(c, c.Controller, "CreateVolume", unmarshalError(err))
	}
	if err := d.wrapCreated(ctx, c, resp.GetVolume(), topology, r.secrets(c)); err != nil {
		return nil, err
	}
	return resp, nil
}

// rewriteCreateVolumeResponse edits a CreateVolumeResponse on the wire: the
// volume's ID wrapped, its accessible_topology replaced by topology, every
// other byte kept. ok=false: not a plain answer, decode it. out=nil with
// ok: the volume ID is empty or cannot be wrapped.
func rewriteCreateVolumeResponse(b []byte, topology accessible.Decision, conn string) (volumeID string, out []byte, ok bool) {
	if !wireValid(b, createVolumeResponseDesc, 0) {
		return "", nil, false
	}
	var volume []byte
	seen := false
	for rest := b; len(rest) > 0; {
		var f field
		f, rest = nextField(rest)
		if seen { // repeated volume fields merge
			return "", nil, false
		}
		volume, seen = f.data, true
	}
	// The volume is written after room for its own tag and length (at most
	// 1+5 bytes), which are filled in once its size is known: one buffer.
	const head = 6
	vol := make([]byte, head, head+len(volume)+len(conn)+128)
	idSeen := false
	for rest := volume; len(rest) > 0; {
		var f field
		f, rest = nextField(rest)
		switch f.num {
		case 2: // volume_id
			if idSeen {
				return "", nil, false
			}
			volumeID, idSeen = string(f.data), true
			continue
		case 5: // accessible_topology
			continue
		}
		vol = append(vol, f.all...)
	}
	if volumeID == "" {
		return "", nil, true
	}
	id, err := ids.Encode(ids.Volume, conn, volumeID)
	if err != nil {
		return volumeID, nil, true
	}
	vol = protowire.AppendTag(vol, 2, protowire.BytesType)
	vol = protowire.AppendString(vol, id)
	vol = topology.AppendWire(vol, 5) // accessible_topology
	var h [head]byte
	hdr := protowire.AppendVarint(protowire.AppendTag(h[:0], 1, protowire.BytesType), uint64(len(vol)-head))
	out = vol[head-len(hdr):]
	copy(out, hdr)
	return volumeID, out, true
}

// forwardRaw is forward for bytes.
func forwardRaw(ctx context.Context, c *connection.Connection, up *upstream.Client, fullMethod, method string, req []byte, resp *rawMessage) error {
	ctx, cancel := upstreamContext(ctx, c)
	defer cancel()
	if err := up.Invoke(ctx, fullMethod, &rawMessage{b: req}, resp, rawCall); err != nil {
		return upstreamError(c, up, method, err)
	}
	return nil
}

// fastStats is a NodeGetVolumeStats request the fast path can serve.
type fastStats struct {
	raw                               []byte
	volumeID, volumePath, stagingPath string
}

func (r *fastStats) decoded() proto.Message {
	m := &csi.NodeGetVolumeStatsRequest{}
	_ = proto.Unmarshal(r.raw, m)
	return m
}

// parseNodeGetVolumeStats reads b for the fast path; ok=false sends it to
// the typed handler.
func parseNodeGetVolumeStats(b []byte) (*fastStats, bool) {
	if !wireValid(b, nodeGetVolumeStatsRequestDesc, 0) {
		return nil, false
	}
	r := &fastStats{raw: b}
	for rest := b; len(rest) > 0; {
		var f field
		f, rest = nextField(rest)
		switch f.num { // the last one wins, as protobuf-go decodes
		case 1:
			r.volumeID = string(f.data)
		case 2:
			r.volumePath = string(f.data)
		case 3:
			r.stagingPath = string(f.data)
		}
	}
	return r, true
}

func (d *Driver) nodeGetVolumeStatsHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := &rawMessage{}
	if err := dec(in); err != nil {
		return nil, err
	}
	r, ok := parseNodeGetVolumeStats(in.b)
	if !ok {
		return serveTyped(ctx, srv, csi.Node_NodeGetVolumeStats_FullMethodName, in.b, &csi.NodeGetVolumeStatsRequest{}, interceptor,
			func(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (proto.Message, error) {
				resp, err := d.NodeGetVolumeStats(ctx, req)
				if err != nil {
					return nil, err
				}
				return resp, nil
			})
	}
	return serve(ctx, srv, csi.Node_NodeGetVolumeStats_FullMethodName, r, interceptor, func(ctx context.Context, req any) (any, error) {
		return d.fastNodeGetVolumeStats(ctx, req.(*fastStats))
	})
}

func newNodeGetVolumeStatsResponse() proto.Message { return &csi.NodeGetVolumeStatsResponse{} }

// fastNodeGetVolumeStats is NodeGetVolumeStats (node.go) on the wire; the
// upstream's answer is passed on as it is.
func (d *Driver) fastNodeGetVolumeStats(ctx context.Context, r *fastStats) (any, error) {
	if r.volumeID != "" && r.volumePath == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_path is required")
	}
	c, id, _, err := d.routeVolume(ctx, "volume_id", r.volumeID, false)
	if err != nil {
		return nil, err
	}
	if err := requireNode(ctx, c, csi.NodeServiceCapability_RPC_GET_VOLUME_STATS, "NodeGetVolumeStats"); err != nil {
		return nil, err
	}
	staging, err := upstreamStagingPath(ctx, c, r.stagingPath)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(id.Handle)+len(r.volumePath)+len(staging)+9)
	for _, f := range []struct {
		num protowire.Number
		s   string
	}{{1, id.Handle}, {2, r.volumePath}, {3, staging}} {
		if f.s != "" {
			out = protowire.AppendTag(out, f.num, protowire.BytesType)
			out = protowire.AppendString(out, f.s)
		}
	}
	resp := &rawMessage{newMsg: newNodeGetVolumeStatsResponse}
	if err := forwardRaw(ctx, c, c.Node, csi.Node_NodeGetVolumeStats_FullMethodName, "NodeGetVolumeStats", out, resp); err != nil {
		return nil, err
	}
	if !wireValid(resp.b, nodeGetVolumeStatsResponseDesc, 0) {
		// Unknown fields pass on as they are, as with the typed handler;
		// an answer that does not decode fails as it would there.
		if err := proto.Unmarshal(resp.b, newNodeGetVolumeStatsResponse()); err != nil {
			return nil, upstreamError(c, c.Node, "NodeGetVolumeStats", unmarshalError(err))
		}
	}
	return resp, nil
}
