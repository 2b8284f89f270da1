package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// The namespaces of an e2e-node node. Each node's containerd and kubelet
// (and so every container kubelet runs with hostNetwork: true) live in a
// network namespace of their own and a mount namespace of their own.
//
// Network: kubelet refuses a loopback --node-ip ("nodeIP can't be
// loopback address": validateNodeIP in k8s.io/kubernetes v1.37.1
// pkg/kubelet/kubelet_node_status.go, which fails every node status
// update), and two kubelets on one network namespace would meet on their
// ports and on every hostNetwork pod's ports. So each node gets a
// namespace whose only interface is its own lo, holding 10.97.0.N/32 (the
// node's InternalIP) and 10.96.0.1/32 (the kubernetes Service's address,
// so pods reach the API server as in any cluster). That lo is the node's
// loopback: nothing on it is routed anywhere, the namespace has no other
// link and no route off the machine, and the API server's 127.0.0.1 port
// is reached through forward, which copies bytes between a listener in
// the node's namespace and a connection the test process dials in its own.
//
// Mount: a namespace in which /var/lib/kubelet and /var/log/pods are bind
// mounts of the node's directories (kubelet writes
// /var/lib/kubelet/device-plugins and /var/log/pods whatever --root-dir
// says, and the chart's default kubeletHostPath is /var/lib/kubelet for
// every node), and / is rshared so the node plugin's Bidirectional mounts
// reach kubelet. Every mount kubelet, containerd and the containers make
// stays in it and goes with it.

// netNS is a named network namespace (ip netns).
type netNS struct {
	name string
	path string
}

// newNetNS adds the namespace with lo up and addrs (CIDR) on lo.
func newNetNS(name string, addrs ...string) (*netNS, error) {
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %v: %s", name, err, out)
	}
	n := &netNS{name: name, path: filepath.Join("/run/netns", name)}
	cmds := [][]string{{"link", "set", "lo", "up"}}
	for _, a := range addrs {
		cmds = append(cmds, []string{"addr", "add", a, "dev", "lo"})
	}
	for _, args := range cmds {
		if out, err := exec.Command("ip", append([]string{"-n", name}, args...)...).CombinedOutput(); err != nil {
			n.delete()
			return nil, fmt.Errorf("ip -n %s %s: %v: %s", name, strings.Join(args, " "), err, out)
		}
	}
	return n, nil
}

func (n *netNS) delete() error {
	if out, err := exec.Command("ip", "netns", "delete", n.name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns delete %s: %v: %s", n.name, err, out)
	}
	return nil
}

// do runs f on an OS thread switched into the namespace. Sockets f
// creates stay in it wherever they are used later. A thread that cannot
// switch back stays locked, so Go ends it with the goroutine.
func (n *netNS) do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open(n.path)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns %s: %w", n.name, err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("setns back from %s: %w", n.name, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// dial connects to addr from inside the namespace (the node plugin's
// metrics on the node's 10.97.0.N, say).
func (n *netNS) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.do(func() (err error) {
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// forwarder copies connections accepted in a node's namespace to target,
// dialled in the test process's namespace (the API server on 127.0.0.1).
type forwarder struct {
	ls     []net.Listener
	target string
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// forward listens on each of addrs inside n and forwards to target.
func (n *netNS) forward(target string, addrs ...string) (*forwarder, error) {
	f := &forwarder{target: target, conns: map[net.Conn]struct{}{}}
	for _, a := range addrs {
		var l net.Listener
		if err := n.do(func() (err error) { l, err = net.Listen("tcp", a); return err }); err != nil {
			f.close()
			return nil, fmt.Errorf("listening on %s in %s: %w", a, n.name, err)
		}
		f.ls = append(f.ls, l)
	}
	for _, l := range f.ls {
		f.wg.Add(1)
		go f.serve(l)
	}
	return f, nil
}

func (f *forwarder) serve(l net.Listener) {
	defer f.wg.Done()
	for {
		in, err := l.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", f.target)
		if err != nil {
			in.Close()
			continue
		}
		if !f.track(in, out) {
			return
		}
		f.wg.Add(2)
		go f.copy(out, in)
		go f.copy(in, out)
	}
}

func (f *forwarder) track(cs ...net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		f.conns[c] = struct{}{}
	}
	return true
}

func (f *forwarder) copy(dst, src net.Conn) {
	defer f.wg.Done()
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
	f.mu.Lock()
	delete(f.conns, dst)
	delete(f.conns, src)
	f.mu.Unlock()
}

// close stops the listeners and every forwarded connection.
func (f *forwarder) close() {
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	for _, l := range f.ls {
		l.Close()
	}
	f.wg.Wait()
}

// mountNS is a mount namespace kept by a bind mount of it on file.
type mountNS struct {
	file string
}

// newMountNS makes the namespace: private from the test's, then / rshared
// inside it (a new peer group, so nothing propagates back), with binds
// (target → source) mounted in it.
func newMountNS(file string, binds [][2]string) (*mountNS, error) {
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		return nil, err
	}
	if out, err := exec.Command("unshare", "--mount="+file, "--propagation", "private", "true").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("unshare --mount=%s: %v: %s", file, err, out)
	}
	m := &mountNS{file: file}
	script := "mount --make-rshared /"
	for _, b := range binds {
		script += fmt.Sprintf(" && mount --bind %q %q", b[1], b[0])
	}
	if out, err := m.command("sh", "-c", script).CombinedOutput(); err != nil {
		m.delete()
		return nil, fmt.Errorf("in the mount namespace: %s: %v: %s", script, err, out)
	}
	return m, nil
}

// command runs name inside the namespace (nsenter execs it: the process
// is name's own).
func (m *mountNS) command(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--mount=" + m.file, "--", name}, args...)...)
}

// delete drops the namespace's bind mount; the namespace, and every
// mount in it, goes when its last process has ended.
func (m *mountNS) delete() error {
	if out, err := exec.Command("umount", m.file).CombinedOutput(); err != nil {
		return fmt.Errorf("umount %s: %v: %s", m.file, err, out)
	}
	return os.Remove(m.file)
}
