// Package kube runs proxy-topology's Kubernetes deployment against a real
// kube-apiserver and etcd on 127.0.0.1: every object of deploy/kubernetes
// (through kustomize) and of the Helm chart must be accepted by the API
// (server-side dry-run), the chart must render the same objects as the
// plain manifests, node plugins read their Node's labels with the node
// ServiceAccount's own token and RBAC, the RBAC grants that and no more, a
// controller serves connections from the watched Secret, and the segments
// the node plugins report make consistent CSINode objects and node labels,
// written here as kubelet would.
//
// It is started by `make e2e-kube`, which builds kube-apiserver, helm and
// kustomize once into .cache/bin and sets PROXY_TOPOLOGY_E2E_KUBE=1 plus
// the binaries' paths. Without that variable every test skips, so
// `go test ./e2e/...` never starts an API server by accident.
//
// The TestRealNode tests (realnode_*_test.go) run with real kubelets:
// `make e2e-node` builds kubelet and the images, sets
// PROXY_TOPOLOGY_E2E_NODE=1 too, and runs only them; two nodes, each a
// containerd and a kubelet in a network and a mount namespace of their
// own (realnode_netns_test.go), join the same control plane, and the
// chart's pods run as containers (docs/kubernetes.md "Run it on real
// nodes"). The configs and test programs are in e2e/node.
package kube
