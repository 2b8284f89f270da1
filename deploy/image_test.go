package deploy

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// imageConfig is the part of an image config (OCI and docker alike) the
// archive test reads.
type imageConfig struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Config       struct {
		Entrypoint []string          `json:"Entrypoint"`
		Cmd        []string          `json:"Cmd"`
		User       string            `json:"User"`
		Labels     map[string]string `json:"Labels"`
	} `json:"config"`
}

// TestImageArchive runs `make image-archive` (what `make image` does
// without a container engine) and opens the archive it writes with the
// standard library alone, as `kind load image-archive` or `ctr images
// import` would: manifest.json names the tag the chart runs, the config
// has the Dockerfile's final stage (ENTRYPOINT, CMD serve, USER 0:0, the
// LABELs with VERSION filled in), and the one layer holds a static binary
// at the ENTRYPOINT that reports the version it was built with.
func TestImageArchive(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and the image archive")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	dir := t.TempDir()
	archive := filepath.Join(dir, "image.tar")
	const version = "image-test"
	mk := exec.Command("make", "--no-print-directory", "image-archive",
		"IMAGE_ARCHIVE="+archive, "IMAGE_BIN="+filepath.Join(dir, "proxy-topology-static"), "VERSION="+version)
	mk.Dir = ".."
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make image-archive: %v\n%s", err, out)
	}
	files := readTar(t, archive)

	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		t.Fatalf("manifest.json: %v %s", err, files["manifest.json"])
	}
	m := manifest[0]
	if want := chartImage(t); !slices.Equal(m.RepoTags, []string{want}) {
		t.Errorf("the archive is tagged %v; the chart runs %s", m.RepoTags, want)
	}

	var cfg imageConfig
	if err := json.Unmarshal(files[m.Config], &cfg); err != nil {
		t.Fatalf("config %s: %v", m.Config, err)
	}
	stages := parseDockerfile(t)
	final := stages[len(stages)-1]
	var entry, cmd []string
	_ = json.Unmarshal([]byte(strings.Join(final.instruction("ENTRYPOINT"), "")), &entry)
	_ = json.Unmarshal([]byte(strings.Join(final.instruction("CMD"), "")), &cmd)
	if len(entry) != 1 {
		t.Fatalf("the Dockerfile's ENTRYPOINT %v", final.instruction("ENTRYPOINT"))
	}
	if !slices.Equal(cfg.Config.Entrypoint, entry) || !slices.Equal(cfg.Config.Cmd, cmd) {
		t.Errorf("ENTRYPOINT %v CMD %v; the Dockerfile's are %v %v", cfg.Config.Entrypoint, cfg.Config.Cmd, entry, cmd)
	}
	if u := final.instruction("USER"); len(u) != 1 || cfg.Config.User != u[0] {
		t.Errorf("USER %q; the Dockerfile's is %v", cfg.Config.User, u)
	}
	if diff := cmp.Diff(dockerfileLabels(t, final, version), cfg.Config.Labels); diff != "" {
		t.Errorf("labels, against the Dockerfile's LABEL with VERSION=%s (-Dockerfile +archive):\n%s", version, diff)
	}
	if cfg.OS != "linux" || cfg.Architecture == "" {
		t.Errorf("platform %s/%s", cfg.OS, cfg.Architecture)
	}

	if len(m.Layers) != 1 {
		t.Fatalf("layers %v, want one (no base image)", m.Layers)
	}
	layer := readLayer(t, files[m.Layers[0]])
	bin, ok := layer[strings.TrimPrefix(entry[0], "/")]
	if !ok {
		t.Fatalf("the layer has no %s: %v", entry[0], keys(layer))
	}
	if bin.hdr.Mode&0o111 == 0 || bin.hdr.Uid != 0 {
		t.Errorf("%s: mode %o uid %d", entry[0], bin.hdr.Mode, bin.hdr.Uid)
	}
	path := filepath.Join(dir, "from-image")
	if err := os.WriteFile(path, bin.data, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary in the image has an ELF interpreter: the image has no libc")
		}
	}
	f.Close()
	if out, err := exec.Command(path, "version").CombinedOutput(); err != nil || !strings.Contains(string(out), version) {
		t.Errorf("the image's binary: version: %v %s", err, out)
	}
	if tmp, ok := layer["tmp/"]; !ok || tmp.hdr.Mode&0o1777 != 0o1777 {
		t.Errorf("no world-writable sticky /tmp in the layer: %v", keys(layer))
	}
}

// dockerfileLabels are the LABELs of a stage with ${VERSION} filled in.
func dockerfileLabels(t *testing.T, s dockerStage, version string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, l := range s.instruction("LABEL") {
		for _, m := range regexp.MustCompile(`([A-Za-z0-9._-]+)="([^"]*)"`).FindAllStringSubmatch(l, -1) {
			out[m[1]] = strings.ReplaceAll(m[2], "${VERSION}", version)
		}
	}
	if len(out) == 0 {
		t.Fatal("the Dockerfile's final stage has no LABEL")
	}
	return out
}

// readTar returns the regular files of a tar archive by name.
func readTar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	for _, e := range tarEntries(t, f) {
		out[e.hdr.Name] = e.data
	}
	return out
}

type tarEntry struct {
	hdr  *tar.Header
	data []byte
}

// readLayer returns a layer's entries by name, gunzipped when compressed.
func readLayer(t *testing.T, blob []byte) map[string]tarEntry {
	t.Helper()
	var r io.Reader = bytes.NewReader(blob)
	if bytes.HasPrefix(blob, []byte{0x1f, 0x8b}) {
		gz, err := gzip.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		r = gz
	}
	out := map[string]tarEntry{}
	for _, e := range tarEntries(t, r) {
		out[e.hdr.Name] = e
	}
	return out
}

func tarEntries(t *testing.T, r io.Reader) []tarEntry {
	t.Helper()
	tr := tar.NewReader(r)
	var out []tarEntry
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tarEntry{hdr: h, data: data})
	}
}
