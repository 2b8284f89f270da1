package csi

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/capability"
)

// Options configures the proxy driver. Zero values are noted per field.
type Options struct {
	// Name and Version are reported by GetPluginInfo.
	Name, Version string
	// NodeID is reported by NodeGetInfo.
	NodeID string
	// Mode is all, controller or node; empty means all.
	Mode string
	// Connections resolves connections and their clients. Required.
	Connections Connections
	// DefaultConnection serves requests without a connection parameter;
	// empty refuses them.
	DefaultConnection string
	// Topology holds the prefix and node topology type used for matching.
	Topology accessible.Options
	// NodeSegments are reported by NodeGetInfo; NodeTopologyErr, when set,
	// makes NodeGetInfo fail instead (a node with no segment).
	NodeSegments    map[string]string
	NodeTopologyErr error
	// MaxVolumesPerNode is reported by NodeGetInfo; 0 means no limit.
	MaxVolumesPerNode int64
	// RollbackTimeout bounds the clean-up call after a failed create;
	// 0 means 30s.
	RollbackTimeout time.Duration
	// ListTimeout bounds a whole ListVolumes, ListSnapshots or
	// ControllerListVolumeHealth fan-out; 0 means 2 minutes. The caller's
	// deadline, when shorter, bounds it too.
	ListTimeout time.Duration
	// MaxListPages bounds how many pages one connection's upstream may
	// return in one listing; 0 means 1000.
	MaxListPages int
	// Capabilities are advertised when Policy is nil; zero means
	// everything supported except controller publishing, with online
	// expansion (see capability.Resolve).
	Capabilities capability.Set
	// Policy, when set, is proxy.capabilities: its auto parts are
	// computed from the connections' upstreams by the capability refresh (capability.Watcher.Refresh)
	// (until the first refresh they advertise nothing), its explicit
	// parts are advertised as given.
	Policy *capability.Policy
	// Accepted, if set, tracks the CSI socket's client connections: when
	// auto capabilities grow after Probe reported ready they are closed,
	// so that the sidecars restart and read the new set (capability.Tracker).
	// nil closes nothing and only warns.
	Accepted *capability.Tracker
	// CapabilityTimeout bounds the capability calls to one upstream in a
	// refresh; 0 means 5s.
	CapabilityTimeout time.Duration
	// MaxIDLength refuses IDs longer than this (proxy.maxIdLength); 0
	// returns them, warning once per connection (see encodeID).
	MaxIDLength int
	// OnLongID, if set, is told about every ID returned over the CSI
	// limit of 128 bytes (kind is "volume" or "snapshot"); the metrics
	// count them with it.
	OnLongID func(connection, kind string)
	// OnLostReply, if set, is told about every CreateVolume or
	// CreateSnapshot (method) whose upstream reply the proxy could not
	// receive, so the object may be left upstream; the metrics count them.
	OnLostReply func(connection, method string)
	// WarnCentralNodeLocal is set for a controller-only process outside
	// the node-local mode (the central Deployment): a capability refresh
	// that finds node-local connections warns, naming them, whenever they
	// differ from those it last warned about (nodelocal.go).
	WarnCentralNodeLocal bool
	// Log receives driver messages; nil means slog.Default().
	Log *slog.Logger
}

// Validate checks the options New is given; each error names the option
// and, where one sets it, the flag or config key at fault.
func (o Options) Validate() error {
	var errs []error
	if o.Connections == nil {
		errs = append(errs, errors.New("csi.Options.Connections is required"))
	}
	if o.Mode != "" {
		if err := CheckMode(o.Mode); err != nil {
			errs = append(errs, err)
		}
	}
	if o.NodeID == "" && o.Mode != ModeController {
		errs = append(errs, errors.New("csi.Options.NodeID (--node-id) is empty in a mode that serves the node service"))
	}
	if o.MaxVolumesPerNode < 0 {
		errs = append(errs, fmt.Errorf("proxy.maxVolumesPerNode %d is negative", o.MaxVolumesPerNode))
	}
	if o.MaxIDLength < 0 {
		errs = append(errs, fmt.Errorf("proxy.maxIdLength %d is negative", o.MaxIDLength))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"RollbackTimeout", o.RollbackTimeout}, {"ListTimeout", o.ListTimeout}, {"CapabilityTimeout", o.CapabilityTimeout}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("csi.Options.%s %s is negative", d.name, d.v))
		}
	}
	if o.MaxListPages < 0 {
		errs = append(errs, fmt.Errorf("csi.Options.MaxListPages %d is negative", o.MaxListPages))
	}
	return errors.Join(errs...)
}

// CheckMode refuses a mode other than all, controller and node, naming
// the --mode flag.
func CheckMode(mode string) error {
	switch mode {
	case ModeAll, ModeController, ModeNode:
		return nil
	}
	return fmt.Errorf("--mode %q: want all, controller or node", mode)
}

// withDefaults returns o with every zero value that has a default (noted
// per field) set to it.
func (o Options) withDefaults() Options {
	if o.Mode == "" {
		o.Mode = ModeAll
	}
	if o.RollbackTimeout == 0 {
		o.RollbackTimeout = 30 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.ListTimeout == 0 {
		o.ListTimeout = defaultListTimeout
	}
	if o.MaxListPages == 0 {
		o.MaxListPages = defaultMaxListPages
	}
	if o.CapabilityTimeout == 0 {
		o.CapabilityTimeout = capability.DefaultTimeout
	}
	return o
}
