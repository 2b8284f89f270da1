package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// proc is a child process serving gRPC on a unix socket.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	sock string
	conn *grpc.ClientConn
	// exited is closed once the process has been reaped.
	exited chan struct{}
}

// start runs argv with its output in dir/<name>.log and waits until Probe
// on sock answers ready.
func start(ctx context.Context, dir, name, sock string, env []string, argv ...string) (*proc, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	// Children die with the benchmark, even if it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, sock: sock, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-p.exited:
			return nil, fmt.Errorf("%s exited during start-up:\n%s", name, p.tail())
		default:
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("%s did not become ready in 60s:\n%s", name, p.tail())
		}
		if _, err := os.Stat(sock); err == nil {
			if p.conn == nil {
				if p.conn, err = dial(sock); err != nil {
					p.stop()
					return nil, err
				}
			}
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			resp, err := csi.NewIdentityClient(p.conn).Probe(pctx, &csi.ProbeRequest{})
			cancel()
			if err == nil && resp.GetReady().GetValue() {
				return p, nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func dial(sock string) (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM and, after a grace period, SIGKILL.
func (p *proc) stop() {
	if p == nil {
		return
	}
	if p.conn != nil {
		_ = p.conn.Close()
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// tail returns the last lines of the process log.
func (p *proc) tail() string {
	data, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

// cpu returns the CPU time the process's threads have run, summed from
// /proc/<pid>/task/*/schedstat (nanoseconds, unlike the 10 ms ticks of
// /proc/<pid>/stat). Go rarely ends a thread, so little time is lost.
func (p *proc) cpu() time.Duration {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", p.pid()))
	if err != nil {
		return 0
	}
	var total int64
	for _, t := range tasks {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", p.pid(), t.Name()))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(data)); len(f) > 0 {
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			total += ns
		}
	}
	return time.Duration(total)
}

// rssKiB reads VmRSS from /proc/<pid>/status.
func rssKiB(pid int) (int64, error) { return statusKiB(pid, "VmRSS") }

// statusKiB reads a "<field>: N kB" line of /proc/<pid>/status.
func statusKiB(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			fields := strings.Fields(rest)
			if len(fields) == 2 && fields[1] == "kB" {
				return strconv.ParseInt(fields[0], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// settledRSS waits for the process's RSS to stop moving (the Go scavenger
// and any lazy start-up work), then reports it.
func settledRSS(pid int) (int64, error) {
	prev, err := rssKiB(pid)
	if err != nil {
		return 0, err
	}
	for i := 0; i < 10; i++ {
		time.Sleep(300 * time.Millisecond)
		cur, err := rssKiB(pid)
		if err != nil {
			return 0, err
		}
		if cur == prev {
			return cur, nil
		}
		prev = cur
	}
	return prev, nil
}
