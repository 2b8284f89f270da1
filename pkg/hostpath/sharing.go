package hostpath

import (
	"fmt"
	"path/filepath"
)

// Settings names the options of a driver other than its base path, in a
// form that is equal for equal settings: a caller that shares drivers
// (the upstream pool) keys them by base path and Settings, so a changed
// setting gets a new driver.
func (o *Options) Settings() string {
	return fmt.Sprintf("stage=%t controllerPublish=%t shared=%t nodeID=%q", o.Stage, o.ControllerPublish, o.Shared, o.NodeID)
}

// CanShareTree reports whether a driver with options o may serve the same
// base path as one with other at the same time; when it may not, the error
// says why. Drivers that differ only in node id or in Shared may: the
// records stay safe for several instances on one tree. Drivers that differ
// in Stage or ControllerPublish may not: one directory tree cannot be
// staged and unstaged at once, nor published with and without a
// controller step. Different base paths never conflict.
func (o *Options) CanShareTree(other *Options) error {
	base := filepath.Clean(o.BasePath)
	if base != filepath.Clean(other.BasePath) {
		return nil
	}
	if o.Stage == other.Stage && o.ControllerPublish == other.ControllerPublish {
		return nil
	}
	return fmt.Errorf("shareBasePath %s is already served with stage=%t controllerPublish=%t", base, other.Stage, other.ControllerPublish)
}
