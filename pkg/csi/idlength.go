package csi

import (
	"context"
	"sync"

	"github.com/democratic-csi/proxy-topology/pkg/backend"
	"github.com/democratic-csi/proxy-topology/pkg/ids"
)

// longIDs remembers which connections have been warned about IDs over the
// CSI limit, so the warning is logged once per connection and kind, not
// once per volume. Its keys are connection names, which the admin
// controls.
type longIDs struct {
	warned sync.Map // longIDKey -> struct{}
}

type longIDKey struct {
	connection string
	kind       ids.Kind
}

// encodeID makes the proxy ID of an upstream handle. With
// proxy.maxIdLength set, an ID over it is an error (ids.ErrTooLong) whose
// message names both lengths; without it an ID over the CSI limit of 128
// bytes is returned, counted (Options.OnLongID) and warned about once per
// connection.
func (d *Driver) encodeID(ctx context.Context, kind ids.Kind, c *backend.Conn, handle string) (string, error) {
	id, err := ids.Encode(kind, c.Name, handle, d.opts.MaxIDLength)
	if err != nil {
		return "", err
	}
	if len(id) > ids.MaxLength {
		if d.opts.OnLongID != nil {
			d.opts.OnLongID(c.Name, kind.String())
		}
		if _, warned := d.longIDs.warned.LoadOrStore(longIDKey{c.Name, kind}, struct{}{}); !warned {
			d.log.WarnContext(ctx, "a "+kind.String()+" id is longer than the CSI limit; it is returned (Kubernetes stores it), set proxy.maxIdLength: 128 to refuse such ids instead; logged once per connection",
				"connection", c.Name, "id_bytes", len(id), "limit", ids.MaxLength,
				"connection_name_bytes", len(c.Name), "upstream_handle_bytes", len(handle))
		}
	}
	return id, nil
}
