package hostpath

// The base path marker: which base path a volume was made under.
//
// A connection whose shareBasePath changes while it holds volumes gets a
// driver on the new, empty path, where the old volumes have no record. A
// DeleteVolume of one of them would then find nothing and answer OK (CSI:
// deleting what does not exist succeeds), so the CO forgets a volume whose
// data stays on disk under the old path, listed nowhere. To tell "never
// existed" from "made elsewhere", every base path holds a marker,
// meta/basepath.json, written once by the first driver that opens it, and
// the handle of every volume made since carries the marker's fingerprint:
// vol-<32 hex>-<8 hex>. A handle with another fingerprint than the base
// path's is FAILED_PRECONDITION naming both paths (the other found by its
// marker among the directories next to the base path, where it can be),
// never "deleted". Handles without a fingerprint, made before markers
// existed, are served as before: nothing can be told about them.
//
// The fingerprint is taken from the path where the marker was first
// written and then travels with the marker, so storage moved as a whole
// (marker included) to a new path keeps its volumes' handles valid
// (docs/operations.md, "Moving a connection's storage").

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// markerFile is the marker's path under a base path.
const markerFile = "meta/basepath.json"

// maxSiblings bounds the directories next to a base path that are read
// looking for another base path's marker.
const maxSiblings = 1000

// marker is meta/basepath.json.
type marker struct {
	// Fingerprint is the 8 hex digits volume handles carry.
	Fingerprint string `json:"fingerprint"`
	// BasePath is where the marker was first written.
	BasePath string `json:"basePath"`
	// Connection is the proxy connection whose driver wrote it ("" for a
	// driver outside the proxy), for `check` and for people.
	Connection string    `json:"connection,omitempty"`
	CreatedAt  time.Time `json:"createdAt"`
}

// splitVolumeHandle returns the volume id and the fingerprint of a handle
// that carries one (vol-<32 hex>-<8 hex>); any other string is returned as
// it is, without one. It runs on every volume call, so it cuts at the
// fixed position instead of matching a pattern.
func splitVolumeHandle(handle string) (id, fingerprint string) {
	const idLen = len("vol-") + 32
	if len(handle) == idLen+1+8 && handle[idLen] == '-' && validVolumeID(handle[:idLen]) && isFingerprint(handle[idLen+1:]) {
		return handle[:idLen], handle[idLen+1:]
	}
	return handle, ""
}

// isFingerprint reports whether s is 8 lower-case hex digits.
func isFingerprint(s string) bool {
	if len(s) != 8 {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// volumeIDOf is the volume id of a handle, whatever its fingerprint.
func volumeIDOf(handle string) string {
	id, _ := splitVolumeHandle(handle)
	return id
}

// handle is the volume handle of the record: its id, with the fingerprint
// of the base path it was made under when it was made with one.
func (r *volumeRecord) handle() string {
	if r.Fingerprint == "" {
		return r.ID
	}
	return r.ID + "-" + r.Fingerprint
}

func fingerprintOf(basePath string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(basePath)))
	return hex.EncodeToString(sum[:4])
}

// readMarker reads the marker of base; the error wraps fs.ErrNotExist when
// there is none.
func readMarker(base string) (*marker, error) {
	f, err := os.Open(filepath.Join(base, markerFile))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, err
	}
	var m marker
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(base, markerFile), err)
	}
	if !isFingerprint(m.Fingerprint) {
		return nil, fmt.Errorf("%s: fingerprint %q is not 8 hex digits", filepath.Join(base, markerFile), m.Fingerprint)
	}
	return &m, nil
}

// ensureMarker returns the marker of base, writing it first when there is
// none (created reports that). Two drivers opening the same new base path
// at once agree: the marker is linked into place, never overwritten.
func ensureMarker(base, connection string) (m *marker, created bool, err error) {
	if m, err := readMarker(base); !errors.Is(err, fs.ErrNotExist) {
		return m, false, err
	}
	m = &marker{Fingerprint: fingerprintOf(base), BasePath: base, Connection: connection, CreatedAt: time.Now().UTC()}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, false, err
	}
	dir := filepath.Join(base, "meta")
	tmp, err := os.CreateTemp(dir, ".basepath-*.json")
	if err != nil {
		return nil, false, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return nil, false, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, false, err
	}
	if err := tmp.Close(); err != nil {
		return nil, false, err
	}
	switch err := os.Link(tmp.Name(), filepath.Join(base, markerFile)); {
	case errors.Is(err, fs.ErrExist):
		m, err := readMarker(base)
		return m, false, err
	case err != nil:
		return nil, false, err
	}
	return m, true, syncDir(dir)
}

// OtherBasePath is a directory next to a base path that holds the marker
// of another base path.
type OtherBasePath struct {
	Path, Fingerprint, Connection string
	// Volumes counts the volume records it holds.
	Volumes int
}

// otherBasePaths lists the directories next to base (at most maxSiblings
// entries of its parent are looked at) that hold a marker with another
// fingerprint than own, with match (nil: any) true for the marker.
func otherBasePaths(base, own string, match func(*marker) bool) []OtherBasePath {
	parent := filepath.Dir(base)
	d, err := os.Open(parent)
	if err != nil {
		return nil
	}
	entries, _ := d.ReadDir(maxSiblings)
	d.Close()
	var out []OtherBasePath
	for _, e := range entries {
		p := filepath.Join(parent, e.Name())
		if !e.IsDir() || p == filepath.Clean(base) {
			continue
		}
		m, err := readMarker(p)
		if err != nil || m.Fingerprint == own || match != nil && !match(m) {
			continue
		}
		vols, _ := VolumesAt(p)
		n := len(vols)
		out = append(out, OtherBasePath{Path: p, Fingerprint: m.Fingerprint, Connection: m.Connection, Volumes: n})
	}
	return out
}

// BasePathReport is what `check` learns about a local-hostpath
// connection's base path without opening a driver on it.
type BasePathReport struct {
	// Marked is true when the base path holds a marker; Fingerprint is
	// its fingerprint.
	Marked      bool
	Fingerprint string
	// Elsewhere lists the directories next to the base path whose marker
	// names the same connection but another fingerprint, and that hold
	// volumes: volumes of the connection made under another base path.
	Elsewhere []OtherBasePath
}

// InspectBasePath reports on base for the connection named connection,
// reading only markers and listing volume records; it writes nothing.
func InspectBasePath(base, connection string) BasePathReport {
	var r BasePathReport
	if m, err := readMarker(base); err == nil {
		r.Marked, r.Fingerprint = true, m.Fingerprint
	}
	for _, o := range otherBasePaths(base, r.Fingerprint, func(m *marker) bool { return connection != "" && m.Connection == connection }) {
		if o.Volumes > 0 {
			r.Elsewhere = append(r.Elsewhere, o)
		}
	}
	return r
}

// volumeID returns the volume id of a handle from a request. A handle
// with another base path's fingerprint is FAILED_PRECONDITION naming both
// base paths; anything else is returned for the caller to check as before.
func (d *Driver) volumeID(handle string) (string, error) {
	id, fp := splitVolumeHandle(handle)
	if fp == "" || fp == d.marker.Fingerprint {
		return id, nil
	}
	where := fmt.Sprintf("under another base path (fingerprint %s; no directory next to %s holds its marker)", fp, d.opts.BasePath)
	for _, o := range otherBasePaths(d.opts.BasePath, d.marker.Fingerprint, func(m *marker) bool { return m.Fingerprint == fp }) {
		where = fmt.Sprintf("under base path %s (fingerprint %s)", o.Path, fp)
		break
	}
	return "", failedPrecondition("volume %s was made %s, not under this driver's base path %s (fingerprint %s): it is still there, untouched. The connection's shareBasePath changed while it held volumes; set it back, or move the old base path as a whole, meta/basepath.json included, to the new one (docs/operations.md, \"Moving a connection's storage\")",
		handle, where, d.opts.BasePath, d.marker.Fingerprint)
}

// VolumeDir is the name, under a base path's volumes/ and meta/volumes/
// (as <name>.json), of the volume a handle names: the handle without its
// base path fingerprint. Tests that look at the disk use it.
func VolumeDir(handle string) string { return volumeIDOf(handle) }
