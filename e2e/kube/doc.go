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
package kube
