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

.PHONY: all build run test unit sanity e2e bench lint fuzz clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/proxy-topology

## run: serve the built-in example config (local-hostpath connections under .run/)
run: build
	@mkdir -p $(RUN_DIR)
	$(BIN) serve --csi-endpoint unix://$(RUN_DIR)/csi/csi.sock --default-dir $(RUN_DIR)/default --node-id "$${NODE_NAME:-$$(hostname)}"

## test: lint, unit tests, csi-sanity and e2e, all under the race detector
test: lint unit sanity e2e

unit:
	$(GO) test $(TESTFLAGS) $$($(GO) list ./... | grep -v -e /tests/sanity -e /e2e)

## sanity: csi-sanity against standalone local-hostpath and the proxy (needs root for mounts)
sanity:
	@mkdir -p $(RUN_DIR); rm -f $(RUN_DIR)/sanity.txt
	SANITY_REPORT=$(RUN_DIR)/sanity.txt $(GO) test $(TESTFLAGS) -timeout 20m ./tests/sanity/; rc=$$?; \
	  cat $(RUN_DIR)/sanity.txt 2>/dev/null; exit $$rc

## e2e: multi-process tests over real sockets and mounts
e2e:
	$(GO) test $(TESTFLAGS) -timeout 20m ./e2e/...

## bench: Go micro-benchmarks, then bench/ptbench: proxy-topology against a raw
## gRPC forwarder and a no-op upstream, scale, memory; writes bench/results.json
## and fails if a target of docs/performance.md is missed
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/...
	$(GO) run ./bench/cmd/ptbench $(PTBENCHFLAGS)

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
