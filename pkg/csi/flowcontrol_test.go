package csi_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// TestStaticFlowControl: the proxy's CSI server and its clients of external
// upstreams use static flow-control windows (upstream.FlowWindow). With
// gRPC's dynamic windows each side answers data it receives with a PING to
// estimate the link's bandwidth, a round trip per call at concurrency 1;
// here neither sends one, to the CO or to the upstream. A message far
// larger than HTTP/2's initial 64 KiB window still crosses both in one
// piece.
func TestStaticFlowControl(t *testing.T) {
	const volumes = 10000
	handles := make([]string, volumes)
	for i := range handles {
		handles[i] = fmt.Sprintf("vol-%05d-%s", i, strings.Repeat("x", 80))
	}
	toUpstream := &frameTap{fromClient: true}
	f := newFakeUpstream(t, withControllerCaps(listCaps...), withVolumes(handles...),
		func(f *fakeUpstream) { f.wrapListener = toUpstream.listener })
	p := startProxy(t)
	p.add(t, "a", conn{Endpoint: f.Endpoint})

	toCO := &frameTap{}
	cc, err := grpc.NewClient(p.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(toCO.dial))
	if err != nil {
		t.Fatal(err)
	}
	controller := csi.NewControllerClient(cc)
	for i := range 3 {
		if _, err := controller.CreateVolume(callCtx(t), createReq(fmt.Sprintf("pvc-%d", i), map[string]string{"connection": "a"})); err != nil {
			t.Fatalf("CreateVolume %d: %v", i, err)
		}
		resp, err := controller.ListVolumes(callCtx(t), &csi.ListVolumesRequest{})
		if err != nil {
			t.Fatalf("ListVolumes %d: %v", i, err)
		}
		if n, size := len(resp.GetEntries()), proto.Size(resp); n != volumes || size < 1e6 {
			t.Fatalf("ListVolumes %d: %d entries in %d bytes, want %d in at least 1 MB", i, n, size, volumes)
		}
	}
	// Closing both ends flushes every frame through the taps.
	cc.Close()
	f.srv.Stop()
	for _, tap := range []struct {
		name string
		*frameTap
	}{{"the proxy to the CO", toCO}, {"the proxy to the upstream", toUpstream}} {
		data, pings, err := tap.counts()
		if err != nil {
			t.Errorf("%s: reading frames: %v", tap.name, err)
		}
		if data == 0 {
			t.Errorf("%s: no DATA frame seen; the tap sees nothing", tap.name)
		}
		if pings != 0 {
			t.Errorf("%s: %d PING frames in %d DATA frames; static windows send none", tap.name, pings, data)
		}
	}
}

// frameTap counts the HTTP/2 frames a connection reads: those the proxy
// sends to a client it dials (dial) or to a server it connects to
// (listener, fromClient: the stream starts with the client preface).
type frameTap struct {
	fromClient bool

	wg          sync.WaitGroup
	mu          sync.Mutex
	data, pings int
	err         error
}

func (ft *frameTap) dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, "unix", strings.TrimPrefix(addr, "unix://"))
	if err != nil {
		return nil, err
	}
	return ft.tap(c), nil
}

func (ft *frameTap) listener(l net.Listener) net.Listener { return tapListener{l, ft} }

type tapListener struct {
	net.Listener
	ft *frameTap
}

func (l tapListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.ft.tap(c), nil
}

// tap returns c with a copy of everything read from it parsed as frames.
func (ft *frameTap) tap(c net.Conn) net.Conn {
	r, w := io.Pipe()
	ft.wg.Add(1)
	go ft.read(r)
	return &tappedConn{Conn: c, copy: w}
}

func (ft *frameTap) read(r *io.PipeReader) {
	defer ft.wg.Done()
	// Whatever happens, keep reading so the connection never blocks.
	defer func() { _, _ = io.Copy(io.Discard, r) }()
	if ft.fromClient {
		if _, err := io.ReadFull(r, make([]byte, len(http2.ClientPreface))); err != nil {
			ft.fail(err)
			return
		}
	}
	fr := http2.NewFramer(nil, r)
	for {
		frame, err := fr.ReadFrame()
		if err != nil {
			if err != io.EOF && err != io.ErrUnexpectedEOF {
				ft.fail(err)
			}
			return
		}
		ft.mu.Lock()
		switch frame := frame.(type) {
		case *http2.DataFrame:
			ft.data++
		case *http2.PingFrame:
			if !frame.IsAck() {
				ft.pings++
			}
		}
		ft.mu.Unlock()
	}
}

func (ft *frameTap) fail(err error) {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if ft.err == nil {
		ft.err = err
	}
}

// counts waits until every tapped connection is closed and read.
func (ft *frameTap) counts() (data, pings int, err error) {
	ft.wg.Wait()
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return ft.data, ft.pings, ft.err
}

type tappedConn struct {
	net.Conn
	copy *io.PipeWriter
}

func (c *tappedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		_, _ = c.copy.Write(b[:n])
	}
	return n, err
}

func (c *tappedConn) Close() error {
	_ = c.copy.Close()
	return c.Conn.Close()
}
