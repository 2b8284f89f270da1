// Package e2e runs proxy-topology as real processes over unix sockets — two
// standalone local-hostpath upstreams, a proxy controller and three proxy
// node plugins — and checks node topology, CreateVolume accessibility in the
// three StorageClass modes of SPEC §9, the node data path over real bind
// mounts, and connection files changing under a running controller.
//
// The tests build the binary once (TestMain), with -race when the suite runs
// with -race, so a data race in any process fails the suite.
package e2e
