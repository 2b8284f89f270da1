// Package csiclient is `proxy-topology csi`: a small CSI client for the
// proxy's socket, for an admin who execs into the pod (the image has no
// other CSI client) or a script that wants JSON.
//
// NewCommand returns the `csi` command and its subcommands; the binary
// mounts it under its root command. Each subcommand makes one CSI call
// (info makes the five Identity and capability calls, list-volumes and
// list-snapshots follow next_token to the end) and prints the answer as
// text, or with -o json as protojson.
//
// The files, by concern:
//
//   - command.go: NewCommand, the flags every subcommand shares
//     (--endpoint, -o, --timeout, --prefix) and what every subcommand does
//     around its call: check the flags, connect, call, print.
//   - errors.go: how a command fails. A *UsageError is a mistake on the
//     command line (exit code 2); an *RPCError is a call that failed
//     (exit 1), printed with its gRPC code spelt as the CSI spec spells it
//     (RESOURCE_EXHAUSTED). Both carry ExitCode, which the binary turns
//     into the process's exit status.
//   - flags.go: flag values: repeatable k=v (--param, --secret), sizes
//     (1Gi, 500Mi, 10G, bytes), topology terms (k=v,k=v; a short key gets
//     --prefix, as node rules do), volume capabilities.
//   - output.go: text and JSON output, and the formats the proxy's own
//     messages use for topology terms.
//   - identity.go (info, node-info), volume.go (create-volume,
//     delete-volume, get-volume, expand-volume, list-volumes,
//     get-capacity), snapshot.go (create-snapshot, delete-snapshot,
//     list-snapshots), node.go (stage, unstage, publish, unpublish): one
//     function per subcommand, building its request from its flags.
//
// A connection is dialled lazily (grpc.NewClient) once the flags are known,
// so an unreachable socket shows as UNAVAILABLE on the first call, with the
// command's --timeout as the deadline of the whole command.
package csiclient
