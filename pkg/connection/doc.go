// Package connection resolves connection names to loaded, validated
// connection files and their upstream clients, reloading a file as soon as
// it changes and caching it for the configured time.
//
// A Connection owns leases on its upstream clients (pkg/upstream): the
// store holds one reference to each cached Connection and every caller of
// Get holds another until it calls Release. When a file changes, is
// removed, or goes unused past the cache timeout, the store drops its
// reference; the Connection releases its clients once the last caller is
// done, so calls in flight finish on the clients they started on and the
// next call gets the new ones.
//
// The files, by concern:
//
//   - store.go: the Store and its cache. Get is a call's look-up (a cache
//     hit costs one Source.Stat); List names the connections that exist.
//     Errors wrap the sentinels ErrInvalidName, ErrNotFound, ErrBroken and
//     ErrUnavailable, which pkg/csi maps to gRPC codes.
//   - survey.go: Survey, a background task's look at every connection
//     (the capability refresh, the loop re-check) that caches none and is
//     not a use, so an unused connection still expires; each distinct
//     upstream client is leased once for the survey.
//   - source.go: where files come from (Source): a folder (FolderSource),
//     or a Kubernetes Secret (pkg/kube's SecretSource).
//   - group.go: connection groups (SPEC §11). A group file becomes a
//     Connection with Members and no upstream; Member resolves one member
//     on every call, so a missing member, or one that is itself a group,
//     is an error of the group naming the member, never cached.
//   - nodelocal.go: node-local connections (SPEC §12): NodeLocal says
//     whether a connection's volumes live on one node's disk (a
//     local-hostpath connection without a topology list); NodeLocalNames
//     lists them from the files alone, for serve's start-up.
//   - inspect.go: Inspect and InspectMember read a connection or a
//     group's member as Get and Member do, without an upstream client,
//     for the topology dry run.
package connection
