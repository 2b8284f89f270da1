// Command image writes the proxy-topology container image as an archive
// (docker save format, which `kind load image-archive`, `ctr images
// import`, `docker load` and `podman load` read) from a static binary,
// without a container engine and without pulling a base image: one layer
// holds the binary at /usr/local/bin/proxy-topology and an empty /tmp.
// The image config is the Dockerfile's final stage: ENTRYPOINT the binary,
// CMD serve, USER 0:0 and its OCI labels. `make image` runs it when no
// docker or podman is installed (`make image-archive` always).
//
// With -entrypoint it writes any other static binary the same way (the
// images `make node-images` builds for e2e-node: a pause image, a test
// workload and the kubernetes-csi sidecars): the binary at that path,
// no CMD, and only the title and version labels.
//
// The archive is reproducible: every file time and the image's creation
// time are SOURCE_DATE_EPOCH (0 when unset), so the same binary gives the
// same image digest.
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// proxyEntrypoint is where the proxy's binary lives in the image, as in
// the Dockerfile.
const proxyEntrypoint = "/usr/local/bin/proxy-topology"

func main() {
	binary := flag.String("binary", "", "the static proxy-topology binary (CGO_ENABLED=0)")
	out := flag.String("o", "bin/proxy-topology-image.tar", "the archive to write")
	tag := flag.String("tag", "ghcr.io/democratic-csi/proxy-topology:0.1.0", "the image's name and tag in the archive")
	version := flag.String("version", "dev", "org.opencontainers.image.version (the Dockerfile's VERSION build arg)")
	entrypoint := flag.String("entrypoint", proxyEntrypoint, "where the binary lives in the image; another path than the proxy's makes a plain image of that binary (no CMD, no proxy labels)")
	flag.Parse()
	if err := run(*binary, *out, *tag, *version, *entrypoint); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(binary, out, tag, version, entrypoint string) error {
	if binary == "" {
		return errors.New("-binary is required")
	}
	if !strings.HasPrefix(entrypoint, "/") || strings.HasSuffix(entrypoint, "/") || path.Clean(entrypoint) != entrypoint {
		return fmt.Errorf("-entrypoint %q: want a clean absolute file path", entrypoint)
	}
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("-tag %q: %w", tag, err)
	}
	arch, err := staticArch(binary)
	if err != nil {
		return err
	}
	created, err := sourceDateEpoch()
	if err != nil {
		return err
	}
	data, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	layerTar, err := rootfs(data, entrypoint, created)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", arch
	cfg.Created = v1.Time{Time: created}
	cfg.Config = v1.Config{
		Entrypoint: []string{entrypoint},
		Cmd:        []string{"serve"},
		// root, as the Dockerfile says and for its reasons: the node
		// plugin mounts, and the controller opens root-owned sockets and
		// host directories.
		User: "0:0",
		Env:  []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Labels: map[string]string{
			"org.opencontainers.image.title":       "proxy-topology",
			"org.opencontainers.image.description": "CSI driver that routes calls to many storage connections, with topology",
			"org.opencontainers.image.source":      "https://github.com/democratic-csi/proxy-topology",
			"org.opencontainers.image.version":     version,
		},
	}
	if entrypoint != proxyEntrypoint {
		cfg.Config.Entrypoint, cfg.Config.Cmd = []string{entrypoint}, nil
		cfg.Config.Labels = map[string]string{
			"org.opencontainers.image.title":   path.Base(entrypoint),
			"org.opencontainers.image.version": version,
		}
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	if err := tarball.WriteToFile(out, ref, img); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s: %s linux/%s %s\n", out, ref, arch, digest)
	return nil
}

// staticArch returns the image architecture of an ELF binary and refuses
// one that needs a dynamic loader: the image has no libc.
func staticArch(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("%s is dynamically linked: build it with CGO_ENABLED=0 (the image has no libc)", path)
		}
	}
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64", nil
	case elf.EM_AARCH64:
		return "arm64", nil
	case elf.EM_PPC64:
		return "ppc64le", nil
	case elf.EM_S390:
		return "s390x", nil
	case elf.EM_RISCV:
		return "riscv64", nil
	}
	return "", fmt.Errorf("%s: ELF machine %s has no image architecture here", path, f.Machine)
}

// sourceDateEpoch is the time every entry of the image carries.
func sourceDateEpoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", s, err)
	}
	return time.Unix(n, 0).UTC(), nil
}

// rootfs is the image's one layer: the directories down to the binary,
// the binary at entrypoint, and /tmp (sticky, world-writable, as on
// distroless).
func rootfs(binary []byte, entrypoint string, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	entries := []tar.Header{{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777}}
	parts := strings.Split(entrypoint[1:], "/")
	for i := 1; i < len(parts); i++ {
		if dir := strings.Join(parts[:i], "/") + "/"; dir != "tmp/" {
			entries = append(entries, tar.Header{Name: dir, Typeflag: tar.TypeDir, Mode: 0o755})
		}
	}
	entries = append(entries, tar.Header{Name: entrypoint[1:], Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(binary))})
	for _, h := range entries {
		h.ModTime, h.Format = mtime, tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(binary); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
