package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const (
	// readyTimeout bounds how long a process may take to serve Probe.
	readyTimeout = 30 * time.Second
	// stopTimeout bounds graceful shutdown after SIGTERM; SIGKILL follows.
	stopTimeout = 15 * time.Second
	// callTimeout bounds every CSI call a test makes.
	callTimeout = 20 * time.Second
	// logTail is how much of a process log is printed when a test fails.
	logTail = 64 << 10
)

// processSpec is one `proxy-topology serve` invocation.
type processSpec struct {
	// name identifies the process in logs and names its socket directory.
	name   string
	config string
	// mode is all, controller or node.
	mode   string
	nodeID string
	// env is added to the cleaned environment (see baseEnv).
	env       []string
	logFormat string
	// args are more serve flags, after the ones every process gets.
	args []string
}

// process is a running proxy-topology with its socket and log file.
type process struct {
	name    string
	sock    string
	logPath string
	cmd     *exec.Cmd
	conn    *grpc.ClientConn

	exited  chan struct{}
	waitErr error // set before exited is closed
	stopped bool
}

// baseEnv is the test's environment without anything the binary would read
// as a flag default, a config override or a topology source, so that each
// process sees exactly the env its spec gives it.
func baseEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "PROXY_TOPOLOGY_"), strings.HasPrefix(k, "CSI_"),
			k == "NODE_NAME", k == "ZONE":
			continue
		}
		out = append(out, kv)
	}
	return out
}

// startProcess starts spec under dir: the socket is dir/sock/<name>/csi.sock
// (alone in its directory, as in a pod) and the log dir/logs/<name>.log. It
// returns once the process answers Probe with ready. A cleanup stops it with
// SIGTERM, checks it exited cleanly and removed its socket, and prints its
// log if the test failed.
func startProcess(t *testing.T, dir string, spec processSpec) *process {
	t.Helper()
	p := launch(t, dir, spec)
	p.waitReady(t)
	return p
}

// launch starts the process without waiting for it.
func launch(t *testing.T, dir string, spec processSpec) *process {
	t.Helper()
	p := &process{
		name:    spec.name,
		sock:    filepath.Join(dir, "sock", spec.name, "csi.sock"),
		logPath: filepath.Join(dir, "logs", spec.name+".log"),
		exited:  make(chan struct{}),
	}
	if err := os.MkdirAll(filepath.Dir(p.logPath), 0o750); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	format := spec.logFormat
	if format == "" {
		format = "text"
	}
	args := []string{"serve",
		"--config", spec.config,
		"--csi-endpoint", "unix://" + p.sock,
		"--mode", spec.mode,
		"--node-id", spec.nodeID,
		"--log-level", "debug",
		"--log-format", format,
	}
	args = append(args, spec.args...)
	p.cmd = exec.Command(binary, args...)
	p.cmd.Env = append(baseEnv(), spec.env...)
	if raceEnabled && os.Getenv("GORACE") == "" {
		// A -race binary sleeps 1s at exit by default so that late
		// reports get out; the processes here are idle when stopped.
		p.cmd.Env = append(p.cmd.Env, "GORACE=atexit_sleep_ms=100")
	}
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	// If the test binary dies (a -timeout panic, a crash), so do the
	// processes, instead of lingering on their sockets.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("start %s: %v", spec.name, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.stop(t)
		p.checkRaces(t)
		if t.Failed() {
			p.printLog(t)
		}
	})
	return p
}

// waitReady waits for the socket, then for Probe to report ready, failing
// early if the process exits.
func (p *process) waitReady(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), readyTimeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	wait := func(what string, last error) {
		t.Helper()
		select {
		case <-p.exited:
			t.Fatalf("%s exited while waiting for %s: %v (log %s)", p.name, what, p.waitErr, p.logPath)
		case <-ctx.Done():
			t.Fatalf("%s: no %s within %s: %v", p.name, what, readyTimeout, last)
		case <-tick.C:
		}
	}
	for {
		fi, err := os.Lstat(p.sock)
		if err == nil && fi.Mode().Type() == fs.ModeSocket {
			break
		}
		wait("socket "+p.sock, err)
	}
	conn, err := grpc.NewClient("unix://"+p.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("%s: client: %v", p.name, err)
	}
	p.conn = conn
	id := csi.NewIdentityClient(conn)
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		resp, err := id.Probe(pctx, &csi.ProbeRequest{}, grpc.WaitForReady(true))
		pcancel()
		if err == nil && (resp.GetReady() == nil || resp.GetReady().GetValue()) {
			return
		}
		if err == nil {
			err = errors.New("probe: ready=false")
		}
		wait("ready Probe", err)
	}
}

// stop sends SIGTERM and waits; a process that does not exit in time is
// killed and the test fails. A graceful stop must exit 0 and remove the
// socket. It is safe to call more than once.
func (p *process) stop(t *testing.T) {
	t.Helper()
	if p.stopped {
		return
	}
	p.stopped = true
	// The client stays connected through SIGTERM, as the CSI sidecars and
	// kubelet do: a graceful stop must not wait for idle connections.
	if p.conn != nil {
		defer p.conn.Close()
	}
	select {
	case <-p.exited:
		t.Errorf("%s exited before it was stopped: %v", p.name, p.waitErr)
		return
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Errorf("%s: SIGTERM: %v", p.name, err)
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-p.exited:
	case <-timer.C:
		t.Errorf("%s did not exit within %s of SIGTERM; killing it", p.name, stopTimeout)
		_ = p.cmd.Process.Kill()
		<-p.exited // SIGKILL cannot be ignored
		return
	}
	if p.waitErr != nil {
		t.Errorf("%s: exit after SIGTERM: %v (want status 0)", p.name, p.waitErr)
	}
	if _, err := os.Lstat(p.sock); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s: socket %s still exists after a graceful stop (lstat: %v)", p.name, p.sock, err)
	}
}

// checkRaces fails the test if the race detector reported a data race in
// the process's log. It runs however the process ended — stopped, killed
// by a fault test, or exited on its own — since a report is written when
// the race happens, not at exit.
func (p *process) checkRaces(t *testing.T) {
	t.Helper()
	<-p.exited // stop and kill wait for it; this is for the log's last line
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		t.Errorf("%s: cannot read its log to look for data races: %v", p.name, err)
		return
	}
	if strings.Contains(string(data), "WARNING: DATA RACE") {
		t.Errorf("%s: the race detector reported a data race; see its log %s", p.name, p.logPath)
	}
}

// printLog logs the tail of the process's log.
func (p *process) printLog(t *testing.T) {
	t.Helper()
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		t.Logf("%s: cannot read log: %v", p.name, err)
		return
	}
	head := ""
	if len(data) > logTail {
		head = fmt.Sprintf("(first %d bytes cut)\n", len(data)-logTail)
		data = data[len(data)-logTail:]
	}
	t.Logf("---- log of %s (%s) ----\n%s%s---- end of %s ----", p.name, p.logPath, head, data, p.name)
}

// callCtx returns a context that bounds one CSI call.
func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}
