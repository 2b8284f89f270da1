package hostpath

import (
	"fmt"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
)

// capabilityError says what is wrong with a VolumeCapability. Malformed ones
// are always INVALID_ARGUMENT; well-formed but unsupported ones get the code
// each RPC's error table prescribes (INVALID_ARGUMENT for CreateVolume,
// FAILED_PRECONDITION for the node RPCs, an unconfirmed answer for
// ValidateVolumeCapabilities).
type capabilityError struct {
	malformed bool
	msg       string
}

func (e *capabilityError) Error() string { return e.msg }

// checkCapability reports whether local-hostpath can serve c. field names the
// request field in messages, e.g. "volume_capabilities[1]".
func checkCapability(field string, c *csi.VolumeCapability) *capabilityError {
	if c == nil {
		return &capabilityError{malformed: true, msg: field + " is empty"}
	}
	switch c.GetAccessType().(type) {
	case *csi.VolumeCapability_Mount:
		if _, _, err := mountFlags(c.GetMount().GetMountFlags()); err != nil {
			return &capabilityError{msg: fmt.Sprintf("%s.mount.mount_flags: %v", field, err)}
		}
	case *csi.VolumeCapability_Block:
		return &capabilityError{msg: field + ": local-hostpath does not support block volumes"}
	default:
		return &capabilityError{malformed: true, msg: field + ".access_type is required (mount or block)"}
	}
	if c.GetAccessMode() == nil {
		return &capabilityError{malformed: true, msg: field + ".access_mode is required"}
	}
	switch m := c.GetAccessMode().GetMode(); m {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
		return nil
	case csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER:
		return &capabilityError{msg: fmt.Sprintf("%s.access_mode %s is not supported: local-hostpath volumes are node-local storage", field, m)}
	default:
		return &capabilityError{malformed: true, msg: fmt.Sprintf("%s.access_mode %s is not a valid access mode", field, m)}
	}
}

// checkCapabilities checks a request's list of capabilities; at least one is
// required.
func checkCapabilities(field string, caps []*csi.VolumeCapability) *capabilityError {
	if len(caps) == 0 {
		return &capabilityError{malformed: true, msg: field + " is required"}
	}
	for i, c := range caps {
		if err := checkCapability(fmt.Sprintf("%s[%d]", field, i), c); err != nil {
			return err
		}
	}
	return nil
}

func readOnlyMode(c *csi.VolumeCapability) bool {
	switch c.GetAccessMode().GetMode() {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:
		return true
	}
	return false
}

// bindFlagOptions are the mount_flags that make sense on a bind mount; they
// are applied with the read-only remount. Anything else (a file system
// option like "discard") cannot be honoured by a bind and is refused rather
// than silently ignored.
var bindFlagOptions = map[string]uintptr{
	"nosuid":      unix.MS_NOSUID,
	"nodev":       unix.MS_NODEV,
	"noexec":      unix.MS_NOEXEC,
	"noatime":     unix.MS_NOATIME,
	"nodiratime":  unix.MS_NODIRATIME,
	"relatime":    unix.MS_RELATIME,
	"strictatime": unix.MS_STRICTATIME,
}

// mountFlags parses mount_flags. "ro" asks for a read-only mount; "rw",
// "bind" and "defaults" are accepted as no-ops because they describe what a
// bind mount does anyway.
func mountFlags(opts []string) (flags uintptr, readonly bool, err error) {
	var bad []string
	for _, o := range opts {
		o = strings.TrimSpace(o)
		switch o {
		case "", "rw", "bind", "defaults":
		case "ro":
			readonly = true
		default:
			f, ok := bindFlagOptions[o]
			if !ok {
				bad = append(bad, o)
				continue
			}
			flags |= f
		}
	}
	if len(bad) > 0 {
		known := []string{"ro", "rw", "bind", "defaults"}
		for k := range bindFlagOptions {
			known = append(known, k)
		}
		slices.Sort(known)
		return 0, false, fmt.Errorf("unsupported flag(s) %q for a bind mount (supported: %s)", bad, strings.Join(known, ", "))
	}
	return flags, readonly, nil
}
