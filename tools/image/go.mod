// Tools module for `make image` without a container engine: writes the
// proxy-topology image as an archive from the static binary with
// go-containerregistry. Separate from the main module so the product
// binary does not depend on it.
module github.com/democratic-csi/proxy-topology/tools/image

go 1.26.0

require github.com/google/go-containerregistry v0.22.1

require (
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
)
