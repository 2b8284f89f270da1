package deploy

import (
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// dockerStage is one FROM ... stage of the Dockerfile: its instructions,
// continuation lines joined, comments dropped.
type dockerStage struct {
	from, name string
	lines      []string
}

func parseDockerfile(t *testing.T) []dockerStage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var stages []dockerStage
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		f := strings.Fields(line)
		if strings.EqualFold(f[0], "FROM") {
			st := dockerStage{}
			for i := 1; i < len(f); i++ {
				if strings.HasPrefix(f[i], "--") {
					continue
				}
				if st.from == "" {
					st.from = f[i]
				} else if strings.EqualFold(f[i], "AS") && i+1 < len(f) {
					st.name = f[i+1]
				}
			}
			stages = append(stages, st)
			return
		}
		if len(stages) > 0 {
			stages[len(stages)-1].lines = append(stages[len(stages)-1].lines, line)
		}
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		if s, ok := strings.CutSuffix(strings.TrimRight(l, " "), "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(l)
		flush()
	}
	flush()
	return stages
}

// instruction returns the arguments of the stage's instructions of kind
// (RUN, COPY, ...), in order.
func (s dockerStage) instruction(kind string) []string {
	var out []string
	for _, l := range s.lines {
		if k, rest, _ := strings.Cut(l, " "); strings.EqualFold(k, kind) {
			out = append(out, strings.TrimSpace(rest))
		}
	}
	return out
}

// shellWords splits a command as sh would for the plain words and double
// quotes a Dockerfile RUN uses.
func shellWords(s string) []string {
	var out []string
	var w strings.Builder
	inWord, quoted := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, inWord = !quoted, true
		case (r == ' ' || r == '\t') && !quoted:
			if inWord {
				out = append(out, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		out = append(out, w.String())
	}
	return out
}

// TestDockerfile checks the image without a container engine (there is
// none here): the build stage's `go build`, run as written, makes a static
// binary; the final stage copies that binary to its ENTRYPOINT, runs as
// root, and ENTRYPOINT plus the args of the shipped manifests make a
// command line the binary accepts; the chart, the manifests and `make
// image` name the same image.
func TestDockerfile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	stages := parseDockerfile(t)
	if len(stages) != 2 || stages[0].name != "build" {
		t.Fatalf("want a build stage and a final stage, got %+v", stages)
	}
	build, final := stages[0], stages[1]
	if !strings.HasPrefix(final.from, "gcr.io/distroless/static") {
		t.Errorf("final stage FROM %s: a static binary on distroless/static is what the rest assumes", final.from)
	}

	// The go build of the build stage, with the build args filled in.
	var cmd []string
	for _, r := range build.instruction("RUN") {
		w := shellWords(r)
		if i := slices.Index(w, "go"); i >= 0 && i+1 < len(w) && w[i+1] == "build" {
			cmd = w
		}
	}
	if cmd == nil {
		t.Fatal("the build stage has no RUN ... go build")
	}
	var env, args []string
	started := false
	for _, w := range cmd {
		switch {
		case strings.HasPrefix(w, "--mount="):
		case !started && regexp.MustCompile(`^[A-Z_]+=`).MatchString(w):
			env = append(env, w)
		case w == "go" && !started:
			started = true
		case started:
			args = append(args, w)
		}
	}
	if !slices.Contains(env, "CGO_ENABLED=0") {
		t.Errorf("go build without CGO_ENABLED=0: env %v", env)
	}
	fill := strings.NewReplacer("${VERSION}", "dockerfile-test", "$TARGETOS", "linux", "$TARGETARCH", runtime.GOARCH)
	for i := range env {
		env[i] = fill.Replace(env[i])
	}
	out := ""
	for i := range args {
		args[i] = fill.Replace(args[i])
		if args[i] == "-o" && i+1 < len(args) {
			out = args[i+1]
		}
	}
	if out == "" {
		t.Fatalf("go build has no -o: %v", args)
	}
	bin := filepath.Join(t.TempDir(), "proxy-topology")
	args[slices.Index(args, out)] = bin
	gb := exec.Command("go", args...)
	gb.Dir = ".."
	gb.Env = append(os.Environ(), env...)
	if b, err := gb.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has an ELF interpreter: it is not static and will not run on distroless/static")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v", libs)
	}
	f.Close()
	if v, err := exec.Command(bin, "version").CombinedOutput(); err != nil || !strings.Contains(string(v), "dockerfile-test") {
		t.Errorf("%s version: %v %s; want the VERSION build arg", bin, err, v)
	}

	// The final stage: the binary at the ENTRYPOINT, root, serve by default.
	var copied bool
	for _, c := range final.instruction("COPY") {
		w := strings.Fields(c)
		copied = copied || len(w) == 3 && w[0] == "--from=build" && w[1] == out
	}
	var entry, cmdArgs []string
	if e := final.instruction("ENTRYPOINT"); len(e) == 1 {
		_ = json.Unmarshal([]byte(e[0]), &entry)
	}
	if c := final.instruction("CMD"); len(c) == 1 {
		_ = json.Unmarshal([]byte(c[0]), &cmdArgs)
	}
	if len(entry) != 1 || !copied || !slices.ContainsFunc(final.instruction("COPY"), func(c string) bool { return strings.HasSuffix(c, " "+entry[0]) }) {
		t.Errorf("ENTRYPOINT %v must be the exec form of the binary copied from %s (COPY %v)", entry, out, final.instruction("COPY"))
	}
	if !slices.Equal(cmdArgs, []string{"serve"}) {
		t.Errorf("CMD %v, want [serve]", cmdArgs)
	}
	if u := final.instruction("USER"); !slices.Equal(u, []string{"0:0"}) {
		t.Errorf("USER %v, want 0:0: the node plugin mounts and the controller opens root-owned sockets and host directories", u)
	}

	// Every shipped manifest's args, after the ENTRYPOINT, parse.
	m := load(t)
	for _, w := range []struct {
		name string
		args []string
	}{
		{"controller", container(t, m.ctrl.Spec.Template.Spec, "proxy-topology").Args},
		{"node", container(t, m.node.Spec.Template.Spec, "proxy-topology").Args},
	} {
		if b, err := exec.Command(bin, append(slices.Clone(w.args), "--help")...).CombinedOutput(); err != nil {
			t.Errorf("%s: %s %v: %v\n%s", w.name, entry, w.args, err, b)
		}
	}
	if err := exec.Command(bin, "serve", "--no-such-flag", "--help").Run(); err == nil {
		t.Error("an unknown flag is accepted: the check above proves nothing")
	}

	// One image name everywhere.
	want := chartImage(t)
	if got := container(t, m.ctrl.Spec.Template.Spec, "proxy-topology").Image; got != want {
		t.Errorf("deploy/kubernetes runs %s, the chart %s", got, want)
	}
	mk, err := os.ReadFile(filepath.Join("..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^IMAGE \?= ` + regexp.QuoteMeta(want) + `$`).Match(mk) {
		t.Errorf("the Makefile's IMAGE is not %s", want)
	}
}

// chartImage is the image the chart runs: its repository value and the
// chart's appVersion.
func chartImage(t *testing.T) string {
	t.Helper()
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	var values struct {
		Image struct {
			Repository string `json:"repository"`
		} `json:"image"`
	}
	readYAML(t, "helm/proxy-topology/Chart.yaml", &chart)
	readYAML(t, "helm/proxy-topology/values.yaml", &values)
	return values.Image.Repository + ":" + chart.AppVersion
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
