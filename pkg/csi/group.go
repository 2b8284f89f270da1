package csi

import (
	"context"
	"fmt"
	"math"
	"slices"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/backend"
	"github.com/democratic-csi/proxy-topology/pkg/ids"
	"github.com/democratic-csi/proxy-topology/pkg/logging"
)

// Connection groups (SPEC §11): a connection file of driver: group has no
// backend; a CreateVolume on it goes to one of its members, chosen by
// accessible.Choose from the request's terms, and the volume's ID names
// that member, so every later call routes to the member like any other
// volume. Clone and restore go to the member that holds the source.
// GetCapacity on a group sums the members that admit the segment.
//
// Listings (ListVolumes, ListSnapshots, ControllerListVolumeHealth) skip
// groups: a group holds no volume of its own, and its members' volumes
// are listed under the members, the names their IDs carry. Capabilities
// likewise come from the members' upstreams, never from a group.

// groupMember resolves a CreateVolume on group g to the member that will
// serve it, with that member's release function. The members the choice
// looked at and did not choose are released before it returns.
func (d *Driver) groupMember(ctx context.Context, g *backend.Conn, req *csi.CreateVolumeRequest) (*backend.Conn, func(), error) {
	if src := req.GetVolumeContentSource(); src != nil {
		return d.sourceMember(ctx, g, req, src)
	}
	requirement := req.GetAccessibilityRequirements()
	// Placement decides on the members' topologies; the one chosen is
	// served with the clients found for it.
	var looked []*backend.Conn
	var releases []func()
	m, why, err := ChooseMember(d.placement(), g.Connection, requirement.GetRequisite(), requirement.GetPreferred(), func(i int) (*backend.Conn, error) {
		m, release, err := d.opts.Connections.Member(ctx, g, i)
		if err == nil {
			looked, releases = append(looked, m), append(releases, release)
		}
		return m, err
	})
	var chosen func()
	for i, l := range looked {
		if err == nil && l == m && chosen == nil {
			chosen = releases[i]
			continue
		}
		releases[i]()
	}
	if err != nil {
		return nil, nil, err
	}
	setConnection(ctx, m.Name)
	d.log.InfoContext(ctx, "group: member chosen", "group", g.Name, "member", m.Name, "name", logging.Caller(req.GetName()), "why", why)
	return m, chosen, nil
}

// sourceMember is the member that holds a clone's or restore's source: a
// volume can be made from a source only within its connection. A source
// outside the group is INVALID_ARGUMENT, as a source of another
// connection is; a member that cannot serve the requested topology is
// RESOURCE_EXHAUSTED (the member's own refusal, which says what it
// offers), never another member.
func (d *Driver) sourceMember(ctx context.Context, g *backend.Conn, req *csi.CreateVolumeRequest, src *csi.VolumeContentSource) (*backend.Conn, func(), error) {
	var id ids.ID
	var err error
	what := "volume_content_source"
	switch {
	case src.GetSnapshot() != nil:
		what = "snapshot"
		id, err = parseID(ids.Snapshot, "volume_content_source.snapshot.snapshot_id", src.GetSnapshot().GetSnapshotId())
	case src.GetVolume() != nil:
		what = "volume"
		id, err = parseID(ids.Volume, "volume_content_source.volume.volume_id", src.GetVolume().GetVolumeId())
	default:
		return nil, nil, status.Error(codes.InvalidArgument, "volume_content_source has neither snapshot nor volume")
	}
	if err != nil {
		return nil, nil, err
	}
	i := slices.Index(g.Members(), id.Connection)
	if i < 0 {
		return nil, nil, status.Errorf(codes.InvalidArgument, "cannot make a volume of group %q from a %s of connection %q: it is not one of the group's members %q, and a volume can be made from a source only within its connection",
			g.Name, what, id.Connection, g.Members())
	}
	m, release, err := d.opts.Connections.Member(ctx, g, i)
	if err != nil {
		return nil, nil, ConnectionError(err)
	}
	if _, err := d.decide(m.Connection, req.GetAccessibilityRequirements()); err != nil {
		release()
		st := status.Convert(err)
		return nil, nil, status.Errorf(st.Code(), "group %q: the source %s is on member %q, which cannot serve the request: %s", g.Name, what, m.Name, st.Message())
	}
	setConnection(ctx, m.Name)
	d.log.InfoContext(ctx, "group: member chosen", "group", g.Name, "member", m.Name, "name", logging.Caller(req.GetName()),
		"why", fmt.Sprintf("it holds the source %s", what))
	return m, release, nil
}

// groupCapacity is GetCapacity on group g: the sum of what the members
// that admit the segment report (0 when none does), so capacity tracking
// steers the scheduler away from zones whose members are full. A member
// without GET_CAPACITY counts as unlimited, and so does the sum.
func (d *Driver) groupCapacity(ctx context.Context, g *backend.Conn, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	var total int64
	for i := range g.Members() {
		m, release, err := d.opts.Connections.Member(ctx, g, i)
		if err != nil {
			return nil, ConnectionError(err)
		}
		resp, err := d.connectionCapacity(ctx, m, req)
		release()
		if err != nil {
			return nil, err
		}
		n := max(resp.GetAvailableCapacity(), 0)
		if total > math.MaxInt64-n {
			total = math.MaxInt64
		} else {
			total += n
		}
	}
	return &csi.GetCapacityResponse{AvailableCapacity: total}, nil
}
