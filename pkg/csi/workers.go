package csi

import "google.golang.org/grpc"

// StreamWorkers is how many long-lived goroutines serve calls; calls beyond
// that many at once get a goroutine of their own, as without workers.
//
// By default gRPC starts a fresh goroutine per call. A proxied call runs
// deep (server handler, interceptors, then a whole gRPC client call to the
// upstream), so every fresh goroutine grows its stack two or three times,
// and runtime.copystack was 11–13% of the proxy's CPU in the benchmark
// profile (docs/performance.md). A worker keeps its grown stack; gRPC
// replaces each worker after 65536 calls so a stack that grew once for an
// odd call is given back. 64 covers the sidecars' usual concurrency; an
// idle worker costs one parked goroutine.
const StreamWorkers = 64

// ServerOptions are the gRPC server options every CSI server of this
// binary uses besides its interceptors.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.NumStreamWorkers(StreamWorkers)}
}
