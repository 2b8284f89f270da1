package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
)

// faultRig is a proxy (mode all, JSON log, metrics on) in front of two
// standalone local-hostpath upstream processes and a built-in connection:
//
//	flaky          csi -> upstream "up1"                  (the one the tests break)
//	flaky-capped   csi -> upstream "up1", csi.timeout 500ms
//	steady         csi -> upstream "up2"
//	builtin        local-hostpath in the proxy process
//	broken         a file whose csi.secrets is mistyped
//	relative       endpoint "Unix:relative.sock", which is no endpoint
//
// Every connection file and every request carries secret values; when the
// test ends, no secret may be found in any process log, any error returned
// to the test, or /metrics.
type faultRig struct {
	dir, connDir string
	bases        map[string]string // connection -> base path of its volumes
	endpoints    map[string]string // connection -> upstream endpoint
	up1Spec      processSpec
	up1, up2     *process
	proxy        *process
	ctrl         csi.ControllerClient
	node         csi.NodeClient
	ident        csi.IdentityClient

	mu      sync.Mutex
	secrets []string // every secret value handed out
	seen    []string // every error message returned to the test
	metrics string   // /metrics as scraped before the proxy stopped
}

func startFaultRig(t *testing.T) *faultRig {
	t.Helper()
	dir := newTestDir(t)
	r := &faultRig{
		dir:     dir,
		connDir: filepath.Join(dir, "connections"),
		bases: map[string]string{
			"flaky":   filepath.Join(dir, "storage", "up1"),
			"steady":  filepath.Join(dir, "storage", "up2"),
			"builtin": filepath.Join(dir, "storage", "builtin"),
		},
	}
	r.bases["flaky-capped"] = r.bases["flaky"]
	// Registered before any process starts, so it runs after they have
	// all stopped and written their last log line.
	t.Cleanup(func() { r.checkNoSecrets(t) })

	cfg := func(name, content string) string {
		p := filepath.Join(dir, "config", name+".yaml")
		testkit.WriteFile(t, p, content, 0o640)
		return p
	}
	r.up1Spec = processSpec{name: "up1", mode: "all", nodeID: "up1", config: cfg("up1", upstreamConfig(r.bases["flaky"], false))}
	r.up1 = launch(t, dir, r.up1Spec)
	r.up2 = launch(t, dir, processSpec{name: "up2", mode: "all", nodeID: "up2", config: cfg("up2", upstreamConfig(r.bases["steady"], false))})
	r.endpoints = map[string]string{"flaky": "unix://" + r.up1.sock, "flaky-capped": "unix://" + r.up1.sock, "steady": "unix://" + r.up2.sock}

	conns := map[string]string{
		"flaky":        csiConnectionWith(r.endpoints["flaky"], "", r.secret("conn-flaky")),
		"flaky-capped": csiConnectionWith(r.endpoints["flaky-capped"], "500ms", r.secret("conn-capped")),
		"steady":       csiConnectionWith(r.endpoints["steady"], "", r.secret("conn-steady")),
		"builtin": fmt.Sprintf("driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: %s\ncsi:\n  secrets:\n    token: %s\n",
			r.bases["builtin"], r.secret("conn-builtin")),
		// yaml.v3 would quote this value, whole, in its type error.
		"broken":   "driver: csi\ncsi:\n  endpoint: unix:///nowhere.sock\n  secrets: " + r.shortSecret() + "\n",
		"relative": "driver: csi\ncsi:\n  endpoint: Unix:relative.sock\n",
	}
	for name, content := range conns {
		testkit.WriteFile(t, filepath.Join(r.connDir, name+".yaml"), content, 0o640)
	}
	main := fmt.Sprintf("driver: proxy\nproxy:\n  configFolder: %s\n  nodeTopology:\n    type: cluster\n    prefix: %s\n", r.connDir, prefix)
	r.proxy = launch(t, dir, processSpec{name: "proxy", mode: "all", nodeID: "node-1", logFormat: "json",
		config: cfg("proxy", main), args: []string{"--metrics-address", "127.0.0.1:0"}})
	for _, p := range []*process{r.up1, r.up2, r.proxy} {
		p.waitReady(t)
	}
	r.ctrl = csi.NewControllerClient(r.proxy.conn)
	r.node = csi.NewNodeClient(r.proxy.conn)
	r.ident = csi.NewIdentityClient(r.proxy.conn)
	// Registered after the proxy started, so it runs before it stops.
	t.Cleanup(func() { r.scrapeMetrics(t) })
	return r
}

// csiConnectionWith is a driver: csi connection file with a timeout ("" for
// none) and one connection secret.
func csiConnectionWith(endpoint, timeout, secret string) string {
	s := "driver: csi\ncsi:\n  endpoint: " + endpoint + "\n"
	if timeout != "" {
		s += "  timeout: " + timeout + "\n"
	}
	return s + "  secrets:\n    token: " + secret + "\n"
}

// secret returns a fresh secret value and remembers it for the final scan.
func (r *faultRig) secret(what string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	v := "s3cr3t" + hex.EncodeToString(b) + "-" + what
	r.mu.Lock()
	r.secrets = append(r.secrets, v)
	r.mu.Unlock()
	return v
}

// shortSecret returns a fresh 10-byte secret value: yaml.v3 quotes values
// of up to 10 bytes whole in its errors. It starts with a letter: ten
// random hex digits are now and then all decimal, and YAML reads them as a
// number, which changes the error the test expects.
func (r *faultRig) shortSecret() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	v := "s" + hex.EncodeToString(b)[:9]
	r.mu.Lock()
	r.secrets = append(r.secrets, v)
	r.mu.Unlock()
	return v
}

// note remembers the message of an error returned to the test, for the
// final scan, and returns err.
func (r *faultRig) note(err error) error {
	if err != nil {
		r.mu.Lock()
		r.seen = append(r.seen, err.Error())
		r.mu.Unlock()
	}
	return err
}

// createReq is a CreateVolume for conn with request secrets.
func (r *faultRig) createReq(name, conn string) *csi.CreateVolumeRequest {
	req := createRequest(name, conn, nil)
	req.Secrets = map[string]string{"pw": r.secret("req-" + name)}
	return req
}

func (r *faultRig) create(ctx context.Context, name, conn string) (string, error) {
	resp, err := r.ctrl.CreateVolume(ctx, r.createReq(name, conn))
	return resp.GetVolume().GetVolumeId(), r.note(err)
}

func (r *faultRig) delete(ctx context.Context, id string) error {
	_, err := r.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: map[string]string{"pw": r.secret("req-delete")}})
	return r.note(err)
}

func (r *faultRig) capacity(ctx context.Context, conn string) error {
	_, err := r.ctrl.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: map[string]string{"connection": conn}})
	return r.note(err)
}

// volumesIn lists the volumes of a built-in driver's base path: those it
// records (the records folder and the journal; an empty volume's directory
// is made at first use) and any volume directory besides, sorted.
func volumesIn(t *testing.T, base string) []string {
	t.Helper()
	seen := map[string]bool{}
	if _, err := os.Stat(base); errors.Is(err, fs.ErrNotExist) {
		return nil // storage never used: a built-in driver creates it on first load
	}
	vols, err := hostpath.VolumesAt(base)
	if err != nil {
		t.Fatalf("volumes of %s: %v", base, err)
	}
	for id := range vols {
		seen[id] = true
	}
	entries, err := os.ReadDir(filepath.Join(base, "volumes"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	for _, e := range entries {
		seen[e.Name()] = true
	}
	return slices.Sorted(maps.Keys(seen))
}

// signal sends sig to the process.
func (p *process) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s: %v: %v", p.name, sig, err)
	}
}

// kill kills the process (SIGKILL ends a stopped process too) and waits
// for it. It counts as stopped: its cleanup expects nothing more.
func (p *process) kill(t *testing.T) {
	t.Helper()
	p.stopped = true
	if p.conn != nil {
		p.conn.Close()
	}
	p.signal(t, syscall.SIGKILL)
	select {
	case <-p.exited:
	case <-time.After(stopTimeout):
		t.Fatalf("%s did not die of SIGKILL", p.name)
	}
}

// restartUp1 starts up1 again on the same socket, keeping the log of the
// killed one for the secret scan.
func (r *faultRig) restartUp1(t *testing.T) {
	t.Helper()
	killed := r.up1.logPath + ".killed"
	if err := os.Rename(r.up1.logPath, killed); err != nil {
		t.Fatal(err)
	}
	// The killed process's cleanup scans its own log for data races.
	r.up1.logPath = killed
	r.up1 = startProcess(t, r.dir, r.up1Spec)
}

// wantTransportError checks a hung or dead upstream's error: code, and the
// connection and endpoint named in the message.
func (r *faultRig) wantTransportError(t *testing.T, err error, code codes.Code, conn string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != code {
		t.Errorf("got %v %q, want %v", st.Code(), st.Message(), code)
		return
	}
	for _, s := range []string{fmt.Sprintf("connection %q", conn), "endpoint " + r.endpoints[conn]} {
		if !strings.Contains(st.Message(), s) {
			t.Errorf("message %q does not contain %q", st.Message(), s)
		}
	}
}

// TestUpstreamKilledMidCall: the upstream dies with a CreateVolume in
// flight. That call and every call while it is down fail with UNAVAILABLE
// naming the connection and its endpoint (a delete too: it must not pass
// for done); other connections keep answering; once the upstream is back
// on the same socket the proxy, never restarted, uses it again within
// seconds, and the retried CreateVolume makes exactly one volume.
func TestUpstreamKilledMidCall(t *testing.T) {
	r := startFaultRig(t)
	warm, err := r.create(callCtx(t), "pvc-warm", "flaky")
	if err != nil {
		t.Fatalf("CreateVolume before the fault: %v", err)
	}

	// SIGSTOP first, so the call is surely in flight (sent, unanswered)
	// when the process dies.
	r.up1.signal(t, syscall.SIGSTOP)
	type result struct {
		err     error
		elapsed time.Duration
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		_, err := r.create(callCtx(t), "pvc-mid", "flaky")
		done <- result{err, time.Since(start)}
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case res := <-done:
		t.Fatalf("CreateVolume to a stopped upstream returned before the kill: %v", res.err)
	default:
	}
	r.up1.kill(t)
	var res result
	select {
	case res = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the in-flight call did not end within 10s of the upstream's death")
	}
	t.Logf("in-flight CreateVolume ended %v after it started: %v", res.elapsed, res.err)
	r.wantTransportError(t, res.err, codes.Unavailable, "flaky")

	t.Run("while down", func(t *testing.T) {
		for _, call := range []struct {
			name string
			fn   func(ctx context.Context) error
		}{
			{"GetCapacity", func(ctx context.Context) error { return r.capacity(ctx, "flaky") }},
			{"CreateVolume", func(ctx context.Context) error { _, err := r.create(ctx, "pvc-down", "flaky"); return err }},
			{"DeleteVolume", func(ctx context.Context) error { return r.delete(ctx, warm) }},
		} {
			start := time.Now()
			err := call.fn(callCtx(t))
			r.wantTransportError(t, err, codes.Unavailable, "flaky")
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("%s took %v; a dead upstream should fail fast", call.name, d)
			}
		}
		for _, conn := range []string{"steady", "builtin"} {
			id, err := r.create(callCtx(t), "pvc-other-"+conn, conn)
			if err != nil {
				t.Fatalf("%s while flaky is down: %v", conn, err)
			}
			if err := r.delete(callCtx(t), id); err != nil {
				t.Fatalf("%s while flaky is down: %v", conn, err)
			}
		}
	})

	pid := r.proxy.cmd.Process.Pid
	r.restartUp1(t)
	back := time.Now()
	var mid string
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		mid, err = r.create(ctx, "pvc-mid", "flaky")
		cancel()
		if err == nil {
			break
		}
		if status.Code(err) != codes.Unavailable || time.Since(back) > 10*time.Second {
			t.Fatalf("CreateVolume %v after the upstream came back: %v", time.Since(back), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("calls succeed again %v after the upstream came back", time.Since(back))
	if d := time.Since(back); d > 5*time.Second {
		t.Errorf("the upstream was back for %v before calls succeeded", d)
	}
	if r.proxy.cmd.Process.Pid != pid {
		t.Fatal("the proxy was restarted")
	}
	if got := volumesIn(t, r.bases["flaky"]); len(got) != 2 {
		t.Errorf("up1 holds volumes %v, want exactly pvc-warm and pvc-mid", got)
	}
	for _, id := range []string{warm, mid} {
		if err := r.delete(callCtx(t), id); err != nil {
			t.Fatalf("DeleteVolume %s: %v", id, err)
		}
	}
	if got := volumesIn(t, r.bases["flaky"]); len(got) != 0 {
		t.Errorf("volumes left on up1: %v", got)
	}
}

// TestUpstreamHangs: the upstream is frozen (SIGSTOP). A call bounded by
// the caller's deadline ends with DEADLINE_EXCEEDED at that deadline;
// calls on a connection with csi.timeout end at the timeout however long
// the caller would wait, naming connection and endpoint; meanwhile 16
// callers on the other connections see no error and no stall. Once the
// upstream thaws it runs the calls it had queued, and the CO's retries of
// the timed-out CreateVolumes find those volumes: one per name, none lost
// or doubled.
func TestUpstreamHangs(t *testing.T) {
	r := startFaultRig(t)
	for _, conn := range []string{"flaky", "flaky-capped"} {
		if err := r.capacity(callCtx(t), conn); err != nil {
			t.Fatalf("GetCapacity %s before the fault: %v", conn, err)
		}
	}
	r.up1.signal(t, syscall.SIGSTOP)
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			r.up1.signal(t, syscall.SIGCONT)
		}
	}
	t.Cleanup(thaw)

	// The load: 16 callers on the healthy connections until the hung
	// calls are done.
	stop := make(chan struct{})
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		loadErr []string
		calls   int
		slowest time.Duration
	)
	for i := range 16 {
		conn := []string{"steady", "builtin"}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
				err := r.capacity(ctx, conn)
				if err == nil {
					var id string
					if id, err = r.create(ctx, fmt.Sprintf("pvc-load-%d-%d", i, n), conn); err == nil {
						err = r.delete(ctx, id)
					}
				}
				cancel()
				d := time.Since(start)
				mu.Lock()
				calls++
				slowest = max(slowest, d)
				if err != nil && len(loadErr) < 10 {
					loadErr = append(loadErr, fmt.Sprintf("%s: %v", conn, err))
				}
				mu.Unlock()
			}
		}()
	}

	var hung sync.WaitGroup
	var hungNames []string
	// The caller's deadline bounds a call on a connection without
	// csi.timeout. The CO's own client reports DEADLINE_EXCEEDED as the
	// deadline passes, so only the code and the time are the proxy's.
	hungNames = append(hungNames, "pvc-hung-caller")
	hung.Add(1)
	go func() {
		defer hung.Done()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		_, err := r.create(ctx, "pvc-hung-caller", "flaky")
		d := time.Since(start)
		if status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("caller deadline 1s: got %v, want DeadlineExceeded", err)
		}
		if d > 3*time.Second {
			t.Errorf("caller deadline 1s: the call took %v", d)
		}
	}()
	// csi.timeout 500ms bounds calls whose caller would wait 20s.
	for i := range 4 {
		name := fmt.Sprintf("pvc-hung-capped-%d", i)
		hungNames = append(hungNames, name)
		hung.Add(1)
		go func() {
			defer hung.Done()
			for _, call := range []func(ctx context.Context) error{
				func(ctx context.Context) error { _, err := r.create(ctx, name, "flaky-capped"); return err },
				func(ctx context.Context) error { return r.capacity(ctx, "flaky-capped") },
			} {
				start := time.Now()
				err := call(callCtx(t))
				d := time.Since(start)
				r.wantTransportError(t, err, codes.DeadlineExceeded, "flaky-capped")
				if d > 3*time.Second {
					t.Errorf("csi.timeout 500ms: the call took %v", d)
				}
			}
		}()
	}
	hung.Wait()
	time.Sleep(200 * time.Millisecond) // some load after the hung calls, too
	close(stop)
	wg.Wait()
	t.Logf("%d load iterations on the healthy connections, slowest %v", calls, slowest)
	for _, e := range loadErr {
		t.Errorf("healthy connection while up1 hangs: %s", e)
	}
	if calls == 0 {
		t.Error("no load ran")
	}
	if slowest > 5*time.Second {
		t.Errorf("a call on a healthy connection took %v while up1 hung", slowest)
	}

	// Thawed, the upstream works through what it had queued. The CO
	// retries every CreateVolume that timed out, with the same name.
	thaw()
	var ids []string
	for _, name := range hungNames {
		deadline := time.Now().Add(callTimeout)
		for {
			id, err := r.create(callCtx(t), name, "flaky")
			if err == nil {
				ids = append(ids, id)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("retried CreateVolume %s after the thaw: %v", name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if got := volumesIn(t, r.bases["flaky"]); len(got) != len(hungNames) {
		t.Errorf("up1 holds %d volumes %v, want one per timed-out name (%d)", len(got), got, len(hungNames))
	}
	for _, id := range ids {
		if err := r.delete(callCtx(t), id); err != nil {
			t.Errorf("DeleteVolume %s: %v", id, err)
		}
	}
	for conn, base := range r.bases {
		if got := volumesIn(t, base); len(got) != 0 {
			t.Errorf("%s: volumes left: %v", conn, got)
		}
	}
}

// TestBrokenConnectionsAndSocket: the proxy's socket is 0660 in a
// directory it made 0750; a connection file with a mistyped secret fails
// with FAILED_PRECONDITION that names the line but not the secret; an
// endpoint that is neither unix:///absolute/path nor host:port is refused
// rather than guessed at; and Probe keeps answering.
func TestBrokenConnectionsAndSocket(t *testing.T) {
	r := startFaultRig(t)
	fi, err := os.Lstat(r.proxy.sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o660 {
		t.Errorf("socket %s has mode %v, want a socket with 0660", r.proxy.sock, fi.Mode())
	}
	di, err := os.Stat(filepath.Dir(r.proxy.sock))
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o750 {
		t.Errorf("socket directory mode %v, want 0750", di.Mode().Perm())
	}

	tests := []struct {
		conn string
		want []string
	}{
		{"broken", []string{`connection "broken"`, "broken.yaml", "csi.secrets: line 4: want a mapping of names to strings; got a string"}},
		{"relative", []string{`connection "relative"`, `csi.endpoint: "Unix:relative.sock": port "relative.sock" is not a number`}},
	}
	for _, tt := range tests {
		t.Run(tt.conn, func(t *testing.T) {
			_, err := r.create(callCtx(t), "pvc-"+tt.conn, tt.conn)
			st := status.Convert(err)
			if st.Code() != codes.FailedPrecondition {
				t.Fatalf("got %v %q, want FailedPrecondition", st.Code(), st.Message())
			}
			for _, w := range tt.want {
				if !strings.Contains(st.Message(), w) {
					t.Errorf("message %q does not contain %q", st.Message(), w)
				}
			}
		})
	}
	resp, err := r.ident.Probe(callCtx(t), &csi.ProbeRequest{})
	if err != nil || !resp.GetReady().GetValue() {
		t.Errorf("Probe = %v, %v", resp, err)
	}
}

// scrapeMetrics fetches /metrics from the proxy, at the address its log
// reports.
func (r *faultRig) scrapeMetrics(t *testing.T) {
	addr := ""
	f, err := os.Open(r.proxy.logPath)
	if err != nil {
		t.Errorf("metrics: %v", err)
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var line struct {
			Msg     string `json:"msg"`
			Address string `json:"address"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving metrics" {
			addr = line.Address
			break
		}
	}
	if addr == "" {
		t.Error("the proxy never logged its metrics address")
		return
	}
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(addr)
	if err != nil {
		t.Errorf("GET %s: %v", addr, err)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s: %s, %v", addr, resp.Status, err)
	}
	if !strings.Contains(string(body), `connection="`) {
		t.Errorf("/metrics has no series per connection; is it the proxy's?")
	}
	r.mu.Lock()
	r.metrics = string(body)
	r.mu.Unlock()
}

// checkNoSecrets looks for every secret value handed out in every process
// log, every error message the test saw and /metrics, by its random part
// (so that a cut value is found too).
func (r *faultRig) checkNoSecrets(t *testing.T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sources := map[string]string{"/metrics": r.metrics, "errors returned": strings.Join(r.seen, "\n")}
	logs, _ := filepath.Glob(filepath.Join(r.dir, "logs", "*"))
	for _, l := range logs {
		data, err := os.ReadFile(l)
		if err != nil {
			t.Errorf("read %s: %v", l, err)
			continue
		}
		sources[filepath.Base(l)] = string(data)
	}
	if len(logs) < 3 {
		t.Errorf("only %d process logs to scan", len(logs))
	}
	for _, s := range r.secrets {
		random := s
		if rest, ok := strings.CutPrefix(s, "s3cr3t"); ok {
			random = rest[:12]
		}
		for name, text := range sources {
			if strings.Contains(text, random) {
				i := strings.Index(text, random)
				t.Errorf("secret %q found in %s: …%s…", s, name, text[max(0, i-200):min(len(text), i+100)])
			}
		}
	}
	if len(r.secrets) == 0 || len(r.seen) == 0 {
		t.Errorf("scanned %d secrets and %d errors: the scan proves nothing", len(r.secrets), len(r.seen))
	}
}
