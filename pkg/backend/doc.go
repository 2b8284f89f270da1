// Package backend is the registry of connection backends: the one place
// that builds the clients a connection's calls go to, external CSI drivers
// over gRPC and the built-in local-hostpath driver, both through
// pkg/upstream's Pool, which shares them per endpoint (or base path and
// settings) and closes them when their last lease goes.
//
// A CSI call asks Registry.Get for "the connection and its client": the
// catalogue (pkg/connection) gives the current version of the file, and
// the registry returns the Conn attached to that version, building its
// clients on the first call that needs them. The Conn lives exactly as
// long as the version: a changed file, a removed one or an expired one
// releases its clients once the calls using them end.
//
// The files, by concern:
//
//   - registry.go: Registry, Conn, Get and Member; the build of a
//     connection's clients, bounded by Options.BuildTimeout (a built-in
//     driver's base path may sit on a hung mount: ErrUnavailable, never
//     cached, the next call tries again); Build, the same clients for a
//     caller that keeps them to itself (the check command).
//   - selfroute.go: the loop guard (SelfGuard). A driver: csi connection
//     that routes back to this proxy is refused when its clients are
//     built, and again whenever a re-check (the capability refresh) finds
//     a cycle; each proxy publishes its markers in GetPluginInfo.
//   - survey.go: Survey, the capability refresh's look at every
//     connection; it caches none and holds one lease per distinct client.
package backend
