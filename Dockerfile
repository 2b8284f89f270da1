# syntax=docker/dockerfile:1
#
# proxy-topology image: a static binary on distroless/static (no shell, no
# package manager, CA certificates and /etc/passwd only).
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) \
#     -t ghcr.io/democratic-csi/proxy-topology:0.1.0 .
#
# VERSION is what GetPluginInfo and `proxy-topology version` report; the
# Makefile computes it the same way (git describe). It is a build argument,
# not read from .git inside the build, so the build context needs no .git
# directory and the image does not change with unrelated commits.
#
# `make image` runs this with docker or podman. The development and CI
# machines have no container engine, so the image itself has never been
# built there; deploy/dockerfile_test.go checks what can be checked without
# one: it runs the build stage's `go build` as written here (a static
# binary: no ELF interpreter, no shared libraries), checks the user and
# that ENTRYPOINT plus the args of every shipped manifest make a command
# line the binary accepts, and that the tag is the one the chart and the
# manifests name.

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Modules first, so a source change does not re-download them.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
ARG TARGETOS=linux
ARG TARGETARCH
# CGO_ENABLED=0: a static binary that runs on distroless/static (no libc).
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/proxy-topology ./cmd/proxy-topology

FROM gcr.io/distroless/static-debian12:latest
ARG VERSION=dev
LABEL org.opencontainers.image.title="proxy-topology" \
      org.opencontainers.image.description="CSI driver that routes calls to many storage connections, with topology" \
      org.opencontainers.image.source="https://github.com/democratic-csi/proxy-topology" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/proxy-topology /usr/local/bin/proxy-topology
# root, said explicitly: the node plugin mounts (the DaemonSet runs it
# privileged), and the controller opens upstream drivers' sockets and
# local-hostpath base paths on host directories, which root owns.
USER 0:0
ENTRYPOINT ["/usr/local/bin/proxy-topology"]
CMD ["serve"]
