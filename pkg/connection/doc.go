// Package connection is the catalogue of connections: it resolves
// connection names to loaded, validated connection files, reloading a file
// as soon as it changes and caching it for the configured time. It knows
// no backend: the upstream clients a connection needs are built by
// pkg/backend's Registry, which keeps them with the connection version as
// its Attachment.
//
// A Connection is one version of a file. The store holds one reference to
// each cached Connection and every caller of Get holds another until it
// calls Release. When a file changes, is removed, or goes unused past the
// cache timeout, the store drops its reference; the Connection closes its
// attachment once the last caller is done, so calls in flight finish on
// the clients they started on and the next call gets the new ones. A new
// version keeps the one it replaced until it has an attachment of its own,
// so an edit that names the same upstream hands its clients over.
//
// The files, by concern:
//
//   - store.go: the Store and its cache. Get is a call's look-up (a cache
//     hit costs one Source.Stat); List names the connections that exist.
//     Errors wrap the sentinels ErrInvalidName, ErrNotFound and ErrBroken
//     (and, from the registry, ErrUnavailable and ErrRefused), which
//     pkg/csi maps to gRPC codes.
//   - look.go: Look, a background task's look at a connection (the
//     capability refresh, the loop re-check) that caches nothing and is
//     not a use, so an unused connection still expires.
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
//     group's member as Get and Member do, without caching, for the
//     topology dry run.
package connection
