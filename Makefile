# proxy-topology. `make run` serves the built-in example config; `make test`
# runs everything CI runs.
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
BIN := bin/proxy-topology
RUN_DIR := $(CURDIR)/.run
# go test flags shared by the suites; -count=1 because the sanity and e2e
# suites touch real mounts and processes and must never come from the cache.
TESTFLAGS ?= -race -count=1
FUZZTIME ?= 10s

.PHONY: all build run test unit sanity interop e2e e2e-kube e2e-node node-images node-runtime kube-tools csi-tools csi-modules etcd image image-archive bench bench-realwork lint fuzz clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/proxy-topology

## image: the container image the chart and deploy/kubernetes name. With
## docker or podman (CONTAINER_ENGINE: the first whose `info` answers, so a
## docker client without a daemon does not count) it is built from the
## Dockerfile; without one, `make image-archive` writes it as an archive.
IMAGE ?= ghcr.io/democratic-csi/proxy-topology:0.1.0
CONTAINER_ENGINE ?= $(shell for e in docker podman; do command -v $$e >/dev/null && $$e info >/dev/null 2>&1 && { command -v $$e; break; }; done)
image:
	@if [ -z "$(CONTAINER_ENGINE)" ]; then \
	  echo "make image: no docker or podman that can build here: writing the image archive instead (make image-archive)"; \
	  $(MAKE) --no-print-directory image-archive; \
	else \
	  $(CONTAINER_ENGINE) build --build-arg VERSION=$(VERSION) -t $(IMAGE) .; \
	fi

## image-archive: the same image as an archive (docker save format), from
## the static binary the Dockerfile builds, with go-containerregistry
## (tools/image) and no container engine or base image download. Load it
## with `kind load image-archive bin/proxy-topology-image.tar`, `ctr -n
## k8s.io images import bin/proxy-topology-image.tar`, or `docker load -i`.
IMAGE_ARCHIVE ?= bin/proxy-topology-image.tar
IMAGE_BIN ?= bin/proxy-topology-static
image-archive:
	@mkdir -p $(dir $(IMAGE_BIN)) $(dir $(IMAGE_ARCHIVE))
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -ldflags "-s -w -X main.version=$(VERSION)" -o $(IMAGE_BIN) ./cmd/proxy-topology
	cd tools/image && $(GO) run . -binary $(abspath $(IMAGE_BIN)) -o $(abspath $(IMAGE_ARCHIVE)) -tag $(IMAGE) -version $(VERSION)

## run: serve the built-in example config (local-hostpath connections under .run/)
run: build
	@mkdir -p $(RUN_DIR)
	$(BIN) serve --csi-endpoint unix://$(RUN_DIR)/csi/csi.sock --default-dir $(RUN_DIR)/default --node-id "$${NODE_NAME:-$$(hostname)}"

## test: lint, unit tests, csi-sanity, e2e, e2e-kube and e2e-node, all under the race detector;
## a test that needs root fails here instead of skipping (internal/testbin.RequireRoot)
test: export PROXY_TOPOLOGY_REQUIRE_ROOT = 1
test: lint unit sanity e2e e2e-kube e2e-node

unit:
	$(GO) test $(TESTFLAGS) $$($(GO) list ./... | grep -v -e /tests/sanity -e /e2e)

## sanity: csi-sanity against standalone local-hostpath and the proxy (needs root for mounts)
sanity:
	@mkdir -p $(RUN_DIR); rm -f $(RUN_DIR)/sanity.txt
	SANITY_REPORT=$(RUN_DIR)/sanity.txt $(GO) test $(TESTFLAGS) -timeout 20m ./tests/sanity/; rc=$$?; \
	  cat $(RUN_DIR)/sanity.txt 2>/dev/null; exit $$rc

# DEMOCRATIC_CSI: a democratic-csi source tree, for interop and the
# real-work section of bench (DEMOCRATIC_CSI_DIR, its older name, is
# accepted too).
DEMOCRATIC_CSI := $(or $(DEMOCRATIC_CSI),$(DEMOCRATIC_CSI_DIR))

## interop: csi-sanity against democratic-csi's local-hostpath driver (node.js,
## run from its source tree DEMOCRATIC_CSI=/path), directly and through the
## proxy; fails if the proxy adds a failure (docs/conformance.md). Root, node,
## npm and rsync; installs its npm production dependencies when missing.
## Then the switch from democratic-csi's proxy driver (TestMigrate* of
## e2e-kube; DEMOCRATIC_CSI_PROXY=<its source tree at bb0e3c3>, or
## DEMOCRATIC_CSI when that tree has the proxy; docs/migration.md)
interop:
	scripts/democratic-csi-sanity.sh "$(DEMOCRATIC_CSI)" $(RUN_DIR)/democratic-csi.md
	$(MAKE) e2e-kube TESTFLAGS="$(TESTFLAGS) -run TestMigrate" DEMOCRATIC_CSI="$(DEMOCRATIC_CSI)" DEMOCRATIC_CSI_PROXY="$(DEMOCRATIC_CSI_PROXY)"

## e2e: multi-process tests over real sockets and mounts
e2e:
	$(GO) test $(TESTFLAGS) -timeout 20m ./e2e/...

## e2e-kube: the deploy/ manifests, the Helm chart and node plugins against a
## real kube-apiserver and etcd, and the real scheduler, controller-manager and
## kubernetes-csi sidecars driving proxy-topology. With DEMOCRATIC_CSI=<source
## tree> the chart's democratic-csi upstream runs too (TestUpstreamsInPods). The first run builds them,
## helm and kustomize from the tools/ modules into .cache/bin (see
## docs/kubernetes.md for the times); later runs reuse them. Versions come from
## the tools modules' go.mod.
CACHE_BIN := $(CURDIR)/.cache/bin
tool_version = $(shell awk '$$1 == "$(2)" { print $$2 }' tools/$(1)/go.mod)
KUBE_VERSION := $(call tool_version,kube,k8s.io/kubernetes)
HELM_VERSION := $(call tool_version,helm,helm.sh/helm/v3)
KUSTOMIZE_VERSION := $(call tool_version,kustomize,sigs.k8s.io/kustomize/kustomize/v5)
KUBE_APISERVER := $(CACHE_BIN)/kube-apiserver-$(KUBE_VERSION)
KUBE_SCHEDULER := $(CACHE_BIN)/kube-scheduler-$(KUBE_VERSION)
KUBE_CONTROLLER_MANAGER := $(CACHE_BIN)/kube-controller-manager-$(KUBE_VERSION)
KUBELET := $(CACHE_BIN)/kubelet-$(KUBE_VERSION)
HELM := $(CACHE_BIN)/helm-$(HELM_VERSION)
KUSTOMIZE := $(CACHE_BIN)/kustomize-$(KUSTOMIZE_VERSION)
# The kubernetes-csi sidecars, all from tools/csi: $(call csi_tool,VAR,cmd,module)
# sets VAR to .cache/bin/<cmd>-<module's version> and adds it to CSI_TOOLS.
define csi_tool
$(1) := $(CACHE_BIN)/$(2)-$(call tool_version,csi,$(3))
$$($(1)): CSI_PKG := $(3)/cmd/$(2)
$$($(1)): CSI_VERSION := $(call tool_version,csi,$(3))
CSI_TOOLS += $$($(1))
endef
$(eval $(call csi_tool,CSI_PROVISIONER,csi-provisioner,github.com/kubernetes-csi/external-provisioner/v6))
$(eval $(call csi_tool,CSI_ATTACHER,csi-attacher,github.com/kubernetes-csi/external-attacher/v4))
$(eval $(call csi_tool,CSI_RESIZER,csi-resizer,github.com/kubernetes-csi/external-resizer/v2))
$(eval $(call csi_tool,CSI_SNAPSHOTTER,csi-snapshotter,github.com/kubernetes-csi/external-snapshotter/v8))
$(eval $(call csi_tool,SNAPSHOT_CONTROLLER,snapshot-controller,github.com/kubernetes-csi/external-snapshotter/v8))
# Stamp the apiserver's version (it reports v0.0.0-master otherwise); only
# the link step depends on it.
KUBE_VERSION_PKG := k8s.io/component-base/version
KUBE_LDFLAGS := -s -w -X $(KUBE_VERSION_PKG).gitVersion=$(KUBE_VERSION) \
  -X $(KUBE_VERSION_PKG).gitMajor=$(word 2,$(subst ., ,$(subst v,v ,$(KUBE_VERSION)))) \
  -X $(KUBE_VERSION_PKG).gitMinor=$(word 3,$(subst ., ,$(subst v,v ,$(KUBE_VERSION)))) \
  -X $(KUBE_VERSION_PKG).gitTreeState=clean

# CSI_NODE_DRIVER_REGISTRAR, CSI_LIVENESSPROBE: optional binaries of those
# sidecars (<name>-<image tag>); the Go module proxy refuses their modules,
# so tools/csi cannot build them. TestUpstreamsInPods runs them when given,
# and by default the ones put in .cache/bin by hand (newest tag) if any.
CSI_NODE_DRIVER_REGISTRAR ?= $(lastword $(sort $(wildcard $(CACHE_BIN)/csi-node-driver-registrar-v*)))
CSI_LIVENESSPROBE ?= $(lastword $(sort $(wildcard $(CACHE_BIN)/livenessprobe-v*)))
e2e-kube: kube-tools csi-tools csi-modules etcd
	PROXY_TOPOLOGY_E2E_KUBE=1 KUBE_APISERVER=$(KUBE_APISERVER) HELM=$(HELM) KUSTOMIZE=$(KUSTOMIZE) DEMOCRATIC_CSI="$(DEMOCRATIC_CSI)" \
	  KUBE_SCHEDULER=$(KUBE_SCHEDULER) KUBE_CONTROLLER_MANAGER=$(KUBE_CONTROLLER_MANAGER) \
	  CSI_PROVISIONER=$(CSI_PROVISIONER) CSI_ATTACHER=$(CSI_ATTACHER) CSI_RESIZER=$(CSI_RESIZER) \
	  CSI_SNAPSHOTTER=$(CSI_SNAPSHOTTER) SNAPSHOT_CONTROLLER=$(SNAPSHOT_CONTROLLER) \
	  CSI_NODE_DRIVER_REGISTRAR="$(CSI_NODE_DRIVER_REGISTRAR)" CSI_LIVENESSPROBE="$(CSI_LIVENESSPROBE)" \
	  $(GO) test $(TESTFLAGS) -timeout 15m ./e2e/kube/

## e2e-node: real nodes (a containerd and a kubelet each, in their own
## network and mount namespaces) joined to the e2e-kube control plane, the
## chart installed with helm and its pods run as containers by kubelet
## (docs/kubernetes.md "Run it on real nodes"). Root; containerd and runc
## from Debian (installed when missing), kubelet built into .cache/bin, the
## images by node-images.
E2E_NODE_IMAGES := $(CURDIR)/.cache/images
E2E_IMAGE_PREFIX := proxy-topology.local/e2e
# E2E_NODE_RUN: the tests e2e-node runs (a go test -run pattern)
E2E_NODE_RUN ?= ^TestRealNode
e2e-node: kube-tools csi-tools etcd node-runtime node-images $(KUBELET)
	@mkdir -p $(RUN_DIR); rm -f $(RUN_DIR)/e2e-node.txt
	PROXY_TOPOLOGY_E2E_KUBE=1 PROXY_TOPOLOGY_E2E_NODE=1 KUBE_APISERVER=$(KUBE_APISERVER) HELM=$(HELM) KUSTOMIZE=$(KUSTOMIZE) \
	  KUBE_SCHEDULER=$(KUBE_SCHEDULER) KUBE_CONTROLLER_MANAGER=$(KUBE_CONTROLLER_MANAGER) KUBELET=$(KUBELET) \
	  CSI_PROVISIONER=$(CSI_PROVISIONER) CSI_ATTACHER=$(CSI_ATTACHER) CSI_RESIZER=$(CSI_RESIZER) \
	  CSI_SNAPSHOTTER=$(CSI_SNAPSHOTTER) SNAPSHOT_CONTROLLER=$(SNAPSHOT_CONTROLLER) \
	  CSI_NODE_DRIVER_REGISTRAR="$(CSI_NODE_DRIVER_REGISTRAR)" CSI_LIVENESSPROBE="$(CSI_LIVENESSPROBE)" \
	  E2E_NODE_IMAGES=$(E2E_NODE_IMAGES) E2E_IMAGE_PREFIX=$(E2E_IMAGE_PREFIX) PROXY_IMAGE=$(IMAGE) \
	  CSI_PROVISIONER_VERSION=$(call tool_version,csi,github.com/kubernetes-csi/external-provisioner/v6) \
	  E2E_NODE_REPORT=$(RUN_DIR)/e2e-node.txt \
	  $(GO) test $(TESTFLAGS) -timeout 15m -run '$(E2E_NODE_RUN)' ./e2e/kube/; rc=$$?; \
	  cat $(RUN_DIR)/e2e-node.txt 2>/dev/null; exit $$rc

## node-runtime: containerd and runc, the Debian packages, installed when
## missing and root (as etcd)
node-runtime:
	@command -v containerd >/dev/null && command -v runc >/dev/null && exit 0; \
	if [ "$$(id -u)" != 0 ]; then echo "containerd or runc is missing: apt-get install containerd runc (as root)"; exit 1; fi; \
	echo "installing containerd and runc"; apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends containerd runc >/dev/null

## node-images: the image archives e2e-node imports into each node's
## containerd (never pulled): the proxy (image-archive), a pause image for
## the sandboxes, the test workload (e2e/node/), and csi-provisioner from
## the static binary csi-tools builds, and node-driver-registrar and
## livenessprobe when their static binaries are given
## (CSI_NODE_DRIVER_REGISTRAR, CSI_LIVENESSPROBE, as for e2e-kube). All
## with tools/image.
IMAGE_TOOL := cd tools/image && $(GO) run .
node-images: image-archive csi-tools
	@mkdir -p $(E2E_NODE_IMAGES) bin
	@# a csi-provisioner cached before the sidecars were built static: once again
	@if ! $(GO) version -m $(CSI_PROVISIONER) | grep -q 'CGO_ENABLED=0'; then \
	  echo "$(CSI_PROVISIONER) is not static: building it again"; rm -f $(CSI_PROVISIONER); $(MAKE) --no-print-directory $(CSI_PROVISIONER); fi
	cp $(IMAGE_ARCHIVE) $(E2E_NODE_IMAGES)/proxy-topology.tar
	@set -e; for p in pause workload; do \
	  CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -ldflags "-s -w" -o bin/e2e-$$p ./e2e/node/$$p; \
	  ( $(IMAGE_TOOL) -binary $(abspath bin)/e2e-$$p -entrypoint /$$p -o $(E2E_NODE_IMAGES)/$$p.tar -tag $(E2E_IMAGE_PREFIX)/$$p:1 -version 1 ); \
	done
	$(IMAGE_TOOL) -binary $(CSI_PROVISIONER) -entrypoint /csi-provisioner -o $(E2E_NODE_IMAGES)/csi-provisioner.tar \
	  -tag $(E2E_IMAGE_PREFIX)/csi-provisioner:$(call tool_version,csi,github.com/kubernetes-csi/external-provisioner/v6) \
	  -version $(call tool_version,csi,github.com/kubernetes-csi/external-provisioner/v6)
	@set -e; for bin in "$(CSI_NODE_DRIVER_REGISTRAR):csi-node-driver-registrar" "$(CSI_LIVENESSPROBE):livenessprobe"; do \
	  path=$${bin%:*}; name=$${bin##*:}; \
	  if [ -n "$$path" ]; then tag=$${path##*-}; \
	    ( $(IMAGE_TOOL) -binary $$path -entrypoint /$$name -o $(E2E_NODE_IMAGES)/$$name.tar -tag $(E2E_IMAGE_PREFIX)/$$name:$$tag -version $$tag ); \
	  else rm -f $(E2E_NODE_IMAGES)/$$name.tar; fi; \
	done

kube-tools: $(KUBE_APISERVER) $(KUBE_SCHEDULER) $(KUBE_CONTROLLER_MANAGER) $(HELM) $(KUSTOMIZE)

csi-tools: $(CSI_TOOLS)

# csi-modules: the sidecar modules whose own files the e2e-kube tests read
# from the Go module cache (their RBAC, the snapshot CRDs), at tools/csi's
# versions. Fetched on every run, whether or not the binaries in .cache/bin
# exist: a kept .cache/bin with a fresh module cache would leave them out.
# go mod download does nothing when they are there.
CSI_MODULES := github.com/kubernetes-csi/external-provisioner/v6 github.com/kubernetes-csi/external-resizer/v2 \
  github.com/kubernetes-csi/external-attacher/v4 github.com/kubernetes-csi/external-snapshotter/v8 \
  github.com/kubernetes-csi/external-snapshotter/client/v8
csi-modules:
	cd tools/csi && $(GO) mod download $(CSI_MODULES)

# Each binary is keyed by its version, built to a temporary name and moved
# into place, so an interrupted build is never mistaken for a cached one.
# kube-apiserver, kube-scheduler and kube-controller-manager share most
# packages: the first build pays for them.
$(CACHE_BIN)/kube-%-$(KUBE_VERSION):
	@mkdir -p $(CACHE_BIN); echo "building kube-$* $(KUBE_VERSION) (first run only)"
	cd tools/kube && time $(GO) build -trimpath -ldflags "$(KUBE_LDFLAGS)" -o $@.tmp k8s.io/kubernetes/cmd/kube-$*
	mv $@.tmp $@

# kubelet, for e2e-node, from the same module and ldflags.
$(KUBELET):
	@mkdir -p $(CACHE_BIN); echo "building kubelet $(KUBE_VERSION) (first run only)"
	cd tools/kube && time $(GO) build -trimpath -ldflags "$(KUBE_LDFLAGS)" -o $@.tmp k8s.io/kubernetes/cmd/kubelet
	mv $@.tmp $@

$(CSI_TOOLS):
	@mkdir -p $(CACHE_BIN); echo "building $(notdir $@) (first run only)"
	cd tools/csi && time CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X main.version=$(CSI_VERSION)" -o $@.tmp $(CSI_PKG)
	mv $@.tmp $@

$(HELM):
	@mkdir -p $(CACHE_BIN)
	cd tools/helm && time $(GO) build -trimpath -ldflags "-s -w" -o $@.tmp helm.sh/helm/v3/cmd/helm
	mv $@.tmp $@

$(KUSTOMIZE):
	@mkdir -p $(CACHE_BIN)
	cd tools/kustomize && time $(GO) build -trimpath -ldflags "-s -w" -o $@.tmp sigs.k8s.io/kustomize/kustomize/v5
	mv $@.tmp $@

## etcd: the Debian package etcd-server, installed when missing and root
etcd:
	@command -v etcd >/dev/null && exit 0; \
	if [ "$$(id -u)" != 0 ]; then echo "etcd is missing: apt-get install etcd-server (as root)"; exit 1; fi; \
	echo "installing etcd-server"; apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends etcd-server >/dev/null

## bench: Go micro-benchmarks, then bench/cmd/ptbench: proxy-topology against
## the typed and raw forwarders and a no-op upstream, a local-hostpath burst,
## scale, memory; writes bench/results.json; then bench/cmd/ptsoak: 10,000
## connection edits under load (docs/reliability.md §9). Both always run;
## it fails if a target of either is missed
##
## ptbench includes the real-work section (issue 19: CreateVolume+DeleteVolume
## pairs on this disk; ptsoak has none); with DEMOCRATIC_CSI=<checkout with
## node_modules> it also measures democratic-csi's local-hostpath and proxy,
## otherwise their targets print "skipped".
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/...
	@rc=0; DEMOCRATIC_CSI="$(DEMOCRATIC_CSI)" $(GO) run ./bench/cmd/ptbench $(PTBENCHFLAGS) || rc=1; \
	  $(GO) run ./bench/cmd/ptsoak $(PTSOAKFLAGS) || rc=1; exit $$rc

## bench-realwork: ptbench's real-work section alone (bench/realwork.json)
bench-realwork:
	DEMOCRATIC_CSI="$(DEMOCRATIC_CSI)" $(GO) run ./bench/cmd/ptbench -only realwork $(PTBENCHFLAGS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go') ); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

## fuzz: run every fuzz target for FUZZTIME each
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 2s $$pkg || exit 1; \
	  done; \
	done

clean:
	rm -rf bin $(RUN_DIR)
