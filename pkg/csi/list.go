package csi

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/backend"
	"github.com/democratic-csi/proxy-topology/pkg/clip"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
	"github.com/democratic-csi/proxy-topology/pkg/ids"
)

// A list token says where a listing stopped: which connection, and the
// upstream's own token inside it. It is opaque to the CO but validated here.
const tokenVersion = "pt1"

func encodeToken(conn, upstreamToken string) string {
	enc := base64.RawURLEncoding
	return tokenVersion + "." + enc.EncodeToString([]byte(conn)) + "." + enc.EncodeToString([]byte(upstreamToken))
}

func decodeToken(tok string) (conn, upstreamToken string, err error) {
	if tok == "" {
		return "", "", nil
	}
	parts := strings.Split(tok, ".")
	bad := func(why string) error {
		return status.Errorf(codes.Aborted, "starting_token %q is not valid: %s; start the listing again", truncate(tok, 80), why)
	}
	if len(parts) != 3 || parts[0] != tokenVersion {
		return "", "", bad("not made by this driver")
	}
	c, err1 := base64.RawURLEncoding.DecodeString(parts[1])
	u, err2 := base64.RawURLEncoding.DecodeString(parts[2])
	if err1 != nil || err2 != nil {
		return "", "", bad("corrupt encoding")
	}
	if ids.ValidateConnectionName(string(c)) != nil {
		return "", "", bad("it names no valid connection")
	}
	return string(c), string(u), nil
}

// truncate shortens s to at most n bytes for a message, on a character
// boundary.
func truncate(s string, n int) string {
	head, cut := clip.Head(s, n)
	if !cut {
		return s
	}
	return head + "…"
}

// checkMaxEntries refuses a negative max_entries (CSI: it MUST NOT be).
func checkMaxEntries(n int32) error {
	if n < 0 {
		return status.Errorf(codes.InvalidArgument, "max_entries %d is negative", n)
	}
	return nil
}

// fetchFunc lists one upstream page of one connection.
type fetchFunc[T any] func(ctx context.Context, c *backend.Conn, maxEntries int32, token string) ([]T, string, error)

// Bounds of a listing when Options leave them zero.
const (
	defaultListTimeout  = 2 * time.Minute
	defaultMaxListPages = 1000
)

// pager walks one connection's pages and cuts off an upstream that pages
// without end: a next_token it handed out before in this listing (or the
// one it was just given), or more than max pages.
type pager struct {
	c      *backend.Conn
	method string
	max    int
	pages  int
	seen   map[string]bool
}

func newPager(c *backend.Conn, method string, max int, start string) *pager {
	p := &pager{c: c, method: method, max: max, seen: map[string]bool{}}
	if start != "" {
		p.seen[start] = true
	}
	return p
}

// next accepts the next_token of one more page.
func (p *pager) next(tok string) error {
	p.pages++
	if tok == "" {
		return nil
	}
	if p.seen[tok] {
		return status.Errorf(codes.Internal, "connection %q (endpoint %s): %s returned next_token %q again after %d pages of this listing; the upstream pages without end, so the listing stops",
			p.c.Name, p.c.Controller.Target, p.method, truncate(tok, 80), p.pages)
	}
	if p.pages >= p.max {
		return status.Errorf(codes.Internal, "connection %q (endpoint %s): %s still returned a next_token after %d pages; the listing stops there",
			p.c.Name, p.c.Controller.Target, p.method, p.pages)
	}
	p.seen[tok] = true
	return nil
}

// fanOut lists across connections in name order, each upstream's pages in
// turn, honouring maxEntries across connection boundaries.
//
// Connections that share an upstream (same endpoint or base path) are each
// listed, so an upstream volume appears once per such connection, each time
// under that connection's ID: a Kubernetes consumer looks a PV's handle up
// in the list, and a PV made through any of them carries that one's ID. An
// upstream without the capability is skipped, and so is a connection
// refused for routing back to this proxy; a connection whose file does not
// load, and an upstream that fails or cannot be reached, fail the call
// with an error naming it, because a silently shortened list reads as
// "these volumes are gone" (the external-attacher re-attaches every volume
// it misses; docs/operations.md, "Listings").
//
// Every listing is bounded: by Options.ListTimeout as a whole, and per
// connection by Options.MaxListPages and by a next_token repeated; each
// cut-off is an error naming the connection.
func fanOut[T any](ctx context.Context, d *Driver, capability csi.ControllerServiceCapability_RPC_Type, method string,
	maxEntries int32, token string, fetch fetchFunc[T]) ([]T, string, error) {
	if err := checkMaxEntries(maxEntries); err != nil {
		return nil, "", err
	}
	startConn, upstreamToken, err := decodeToken(token)
	if err != nil {
		return nil, "", err
	}
	names, err := d.opts.Connections.List()
	if err != nil {
		return nil, "", status.Errorf(codes.FailedPrecondition, "cannot list connections in %s: %v", d.opts.Connections.Location(), err)
	}
	ctx, cancel := context.WithTimeout(ctx, d.opts.ListTimeout)
	defer cancel()
	var out []T
	for i, name := range names {
		if name < startConn {
			continue // listed on an earlier page: nothing is built for it
		}
		if err := ctx.Err(); err != nil {
			return nil, "", status.Errorf(status.FromContextError(err).Code(), "%s stopped before connection %q: %v", method, name, err)
		}
		tok := ""
		if name == startConn {
			tok = upstreamToken
		}
		var next string
		out, next, err = listConnection(ctx, d, capability, method, name, maxEntries, tok, out, fetch)
		if err != nil {
			return nil, "", err
		}
		if next != "" {
			return out, encodeToken(name, next), nil
		}
		if maxEntries > 0 && int32(len(out)) >= maxEntries && i+1 < len(names) {
			return out, encodeToken(names[i+1], ""), nil
		}
	}
	return out, "", nil
}

// listConnection appends connection name's entries to out, from the
// upstream's token tok, until out holds maxEntries (0: no bound); next is
// the upstream's token where it stopped, "" when the connection is done.
// The connection is got, used and released here, one at a time.
func listConnection[T any](ctx context.Context, d *Driver, capability csi.ControllerServiceCapability_RPC_Type, method, name string,
	maxEntries int32, tok string, out []T, fetch fetchFunc[T]) ([]T, string, error) {
	c, release, err := d.opts.Connections.Get(ctx, name)
	if err != nil {
		if skipInListing(err) {
			d.log.WarnContext(ctx, "skipping connection in listing", "connection", name, "error", err)
			return out, "", nil
		}
		// Its volumes cannot be listed, and a list without them reads as
		// "these volumes are gone", as with an upstream that fails.
		what := "does not load (fix or remove its file)"
		if errors.Is(err, connection.ErrUnavailable) {
			what = "cannot be reached"
		}
		st := status.Convert(ConnectionError(err))
		return nil, "", status.Errorf(st.Code(), "%s: connection %q %s, and a list without its volumes would tell the CO they are gone: %s",
			method, name, what, st.Message())
	}
	defer release()
	ok, err := controllerHas(ctx, c, capability)
	if err != nil || !ok {
		return out, "", err
	}
	pages := newPager(c, method, d.opts.MaxListPages, tok)
	for {
		if err := ctx.Err(); err != nil {
			return nil, "", status.Errorf(status.FromContextError(err).Code(), "connection %q (endpoint %s): %s stopped after %d pages: %v",
				c.Name, c.Controller.Target, method, pages.pages, err)
		}
		var remaining int32
		if maxEntries > 0 {
			remaining = maxEntries - int32(len(out))
		}
		items, next, err := fetch(ctx, c, remaining, tok)
		if err != nil {
			return nil, "", err
		}
		if err := pages.next(next); err != nil {
			return nil, "", err
		}
		out = append(out, items...)
		if next == "" {
			return out, "", nil
		}
		tok = next
		if maxEntries > 0 && int32(len(out)) >= maxEntries {
			return out, next, nil
		}
	}
}

// skipInListing reports whether a connection the registry could not give
// (err) is left out of a listing rather than failing it: its file went
// away after the folder was read, or the loop guard refused it for routing
// back to this proxy, when it loaded or at a later re-check
// (connection.ErrRefused). A connection that routes
// back has no volumes of its own (what it reaches is listed under the
// connections that reach it directly), and listing it would recurse. Any
// other failure may hide volumes, so it fails the listing.
func skipInListing(err error) bool {
	return errors.Is(err, connection.ErrNotFound) || errors.Is(err, connection.ErrRefused)
}

// ListVolumes lists every connection's volumes with proxy IDs and the
// connection's topology.
func (d *Driver) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	entries, next, err := fanOut(ctx, d, csi.ControllerServiceCapability_RPC_LIST_VOLUMES, "ListVolumes", req.GetMaxEntries(), req.GetStartingToken(),
		func(ctx context.Context, c *backend.Conn, max int32, tok string) ([]*csi.ListVolumesResponse_Entry, string, error) {
			resp, err := forward(ctx, c, c.Controller, "ListVolumes",
				&csi.ListVolumesRequest{MaxEntries: max, StartingToken: tok}, c.Controller.Controller.ListVolumes)
			if err != nil {
				return nil, "", err
			}
			// Only a connection with upstreamTopology reads each volume's
			// own answer; the others share one topology.
			mapped := !c.Topology(d.opts.Topology).Upstream().Empty()
			topology, err := d.existingTopology(ctx, c.Connection, "", nil)
			if err != nil {
				return nil, "", err
			}
			out := resp.GetEntries()[:0]
			for _, e := range resp.GetEntries() {
				vol := e.GetVolume()
				id, err := d.encodeID(ctx, ids.Volume, c, vol.GetVolumeId())
				if err != nil {
					d.log.WarnContext(ctx, "listing: upstream volume cannot get a proxy id; left out", "connection", c.Name, "error", err)
					continue
				}
				vol.VolumeId = id
				if mapped {
					// A volume whose topology is unknown fails the listing
					// (SPEC §6: a shortened list is never safer than an error).
					if vol.AccessibleTopology, err = d.existingTopology(ctx, c.Connection, id, vol.GetAccessibleTopology()); err != nil {
						return nil, "", err
					}
				} else {
					vol.AccessibleTopology = topology
				}
				if src := vol.GetContentSource(); src != nil {
					vol.ContentSource = wrapSource(c, src)
				}
				if st := e.GetStatus(); st != nil {
					st.PublishedNodeIds = nodeNames(c, st.GetPublishedNodeIds())
				}
				out = append(out, e)
			}
			return out, resp.GetNextToken(), nil
		})
	if err != nil {
		return nil, err
	}
	return &csi.ListVolumesResponse{Entries: entries, NextToken: next}, nil
}

// ListSnapshots lists every connection's snapshots, or, with a snapshot_id
// or source_volume_id filter, asks only the connection that ID names.
func (d *Driver) ListSnapshots(ctx context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	// Checked here too: a filtered listing does not go through fanOut.
	if err := checkMaxEntries(req.GetMaxEntries()); err != nil {
		return nil, err
	}
	fetch := func(ctx context.Context, c *backend.Conn, max int32, tok string) ([]*csi.ListSnapshotsResponse_Entry, string, error) {
		out := outbound(req)
		out.MaxEntries, out.StartingToken = max, tok
		out.Secrets = merge(c.Config.CSI.Secrets, req.GetSecrets())
		if req.GetSnapshotId() != "" {
			out.SnapshotId = mustParse(ids.Snapshot, req.GetSnapshotId()).Handle
		}
		if req.GetSourceVolumeId() != "" {
			out.SourceVolumeId = mustParse(ids.Volume, req.GetSourceVolumeId()).Handle
		}
		resp, err := forward(ctx, c, c.Controller, "ListSnapshots", out, c.Controller.Controller.ListSnapshots)
		if err != nil {
			return nil, "", err
		}
		entries := resp.GetEntries()[:0]
		for _, e := range resp.GetEntries() {
			if d.wrapSnapshot(ctx, c, e.GetSnapshot()) {
				entries = append(entries, e)
			}
		}
		return entries, resp.GetNextToken(), nil
	}

	// A filter names one connection: route there directly. An ID the proxy
	// never made matches nothing (CSI: an empty list, not an error).
	var filter *ids.ID
	for _, f := range []struct {
		kind  ids.Kind
		value string
	}{{ids.Snapshot, req.GetSnapshotId()}, {ids.Volume, req.GetSourceVolumeId()}} {
		if f.value == "" {
			continue
		}
		id, err := ids.Parse(f.kind, f.value)
		if err != nil || filter != nil && filter.Connection != id.Connection {
			return &csi.ListSnapshotsResponse{}, nil
		}
		filter = &id
	}
	if filter == nil {
		entries, next, err := fanOut(ctx, d, csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS, "ListSnapshots", req.GetMaxEntries(), req.GetStartingToken(), fetch)
		if err != nil {
			return nil, err
		}
		return &csi.ListSnapshotsResponse{Entries: entries, NextToken: next}, nil
	}
	c, release, err := d.connection(ctx, filter.Connection)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := requireController(ctx, c, csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS, "ListSnapshots"); err != nil {
		return nil, err
	}
	// The upstream's token is passed through as is: with a filter the
	// listing never leaves this connection.
	entries, next, err := fetch(ctx, c, req.GetMaxEntries(), req.GetStartingToken())
	if err != nil {
		return nil, err
	}
	// The CO pages on with the token it is given: one the upstream was
	// just handed back would loop it forever.
	if err := newPager(c, "ListSnapshots", d.opts.MaxListPages, req.GetStartingToken()).next(next); err != nil {
		return nil, err
	}
	return &csi.ListSnapshotsResponse{Entries: entries, NextToken: next}, nil
}

// mustParse is for IDs already validated by the caller.
func mustParse(kind ids.Kind, s string) ids.ID {
	id, _ := ids.Parse(kind, s)
	return id
}
