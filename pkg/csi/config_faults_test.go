package csi_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/connection"
)

// Bounds of the config-fault loop: it stops after faultEdits edits of the
// broken connection's file or after faultDuration, whichever comes first.
const (
	faultEdits    = 400
	faultDuration = 3 * time.Second
	faultCallers  = 64
)

// faultConn is a connection file that stays invalid when cut short
// anywhere: "driver" comes last, so every prefix of it lacks a driver or
// names a wrong one, and an in-place rewrite read half-way can never pass
// for a valid connection to a wrong endpoint.
func faultConn(endpoint string) string {
	return "csi:\n  endpoint: " + endpoint + "\n  timeout: 10s\ndriver: csi\n"
}

// faultReasons are the reasons the broken connection's calls may fail
// with; each edit of the loop below produces one of them.
var faultReasons = []string{
	"has no file",                            // deleted
	"driver: required",                       // truncated, or cut before "driver"
	"is not one of csi, local-hostpath",      // cut inside a driver name
	"yaml: ",                                 // invalid YAML
	"; got ",                                 // cut to a value of the wrong shape ("the file: line 1: want a mapping …; got a string")
	"is only valid in the main config",       // driver: proxy
	`csi.endpoint: "Unix:relative.sock"`,     // an endpoint that is no endpoint
	"is a directory",                         // replaced by a directory
	"not a regular file",                     // replaced by a FIFO
	"csi.endpoint: required for driver: csi", // cut before the endpoint
}

// TestConnectionFilesChangeUnderLoad: 64 callers call three connections
// while one connection's file is rewritten, truncated, made invalid,
// deleted and restored as fast as possible. The untouched connections see
// no error at all; the broken one succeeds or fails with
// FAILED_PRECONDITION naming it and the reason, and nothing else; no call
// panics, and the proxy answers Probe afterwards. The package's TestMain
// checks that no goroutine outlives the test.
func TestConnectionFilesChangeUnderLoad(t *testing.T) {
	for _, cache := range []struct {
		name    string
		timeout time.Duration
	}{{"no cache", 0}, {"cached", time.Hour}} {
		t.Run(cache.name, func(t *testing.T) {
			fa, fb, fc1, fc2 := newFakeUpstream(t), newFakeUpstream(t), newFakeUpstream(t), newFakeUpstream(t)
			p := startProxyStore(t, func(o *connection.Options) { o.CacheTimeout = cache.timeout })
			p.write(t, "a", faultConn(fa.Endpoint))
			p.write(t, "b", faultConn(fb.Endpoint))
			p.write(t, "c", faultConn(fc1.Endpoint))
			path := filepath.Join(p.Folder, "c.yaml")

			calls := faultCalls(p)
			stop := make(chan struct{})
			var (
				wg                 sync.WaitGroup
				cOK, cFailed, each atomic.Int64
				mu                 sync.Mutex
				unexpected         []string
			)
			report := func(format string, args ...any) {
				mu.Lock()
				defer mu.Unlock()
				if len(unexpected) < 20 {
					unexpected = append(unexpected, fmt.Sprintf(format, args...))
				}
			}
			for i := range faultCallers {
				conn := []string{"a", "b", "c"}[i%3]
				call := calls[(i/3)%len(calls)]
				wg.Add(1)
				go func() {
					defer wg.Done()
					for n := 0; ; n++ {
						select {
						case <-stop:
							return
						default:
						}
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						err := call.fn(ctx, conn, fmt.Sprintf("%d-%d", i, n))
						cancel()
						each.Add(1)
						switch {
						case conn != "c":
							if err != nil {
								report("%s on untouched connection %s: %v", call.name, conn, err)
							}
						case err == nil:
							cOK.Add(1)
						default:
							cFailed.Add(1)
							if msg := precise(err); msg != "" {
								report("%s on c: %s", call.name, msg)
							}
						}
					}
				}()
			}

			edits := faultEditSteps(t, path, fc1.Endpoint, fc2.Endpoint)
			start := time.Now()
			n := 0
			for ; n < faultEdits && time.Since(start) < faultDuration; n++ {
				edits[n%len(edits)]()
				time.Sleep(time.Millisecond) // let calls in between edits
			}
			// Leave c valid again; its very next calls must succeed.
			edits[0]()
			close(stop)
			wg.Wait()
			t.Logf("%d edits of c.yaml in %v; %d calls: c succeeded %d times and failed precisely %d times",
				n, time.Since(start).Round(time.Millisecond), each.Load(), cOK.Load(), cFailed.Load())

			for _, u := range unexpected {
				t.Error(u)
			}
			if cOK.Load() == 0 || cFailed.Load() == 0 {
				t.Errorf("c succeeded %d and failed %d times; the loop should see both", cOK.Load(), cFailed.Load())
			}
			for _, call := range calls {
				if err := call.fn(callCtx(t), "c", "after"); err != nil {
					t.Errorf("%s on c after it was restored: %v", call.name, err)
				}
			}
			if logs := p.Logs.String(); strings.Contains(logs, "panic") {
				t.Errorf("a handler panicked:\n%s", logs)
			}
			probeOK(t, p)
		})
	}
}

// precise returns "" when err is the precise error a call for the broken
// connection c may get, and a description of err otherwise.
func precise(err error) string {
	st := status.Convert(err)
	if st.Code() != codes.FailedPrecondition {
		return fmt.Sprintf("got %v %q, want FailedPrecondition", st.Code(), st.Message())
	}
	if !strings.Contains(st.Message(), `connection "c"`) {
		return fmt.Sprintf("message %q does not name connection c", st.Message())
	}
	for _, r := range faultReasons {
		if strings.Contains(st.Message(), r) {
			return ""
		}
	}
	return fmt.Sprintf("message %q gives none of the expected reasons", st.Message())
}

// faultCall is one RPC the callers repeat for a connection; tag makes
// names and IDs unique per call.
type faultCall struct {
	name string
	fn   func(ctx context.Context, conn, tag string) error
}

func faultCalls(p *testProxy) []faultCall {
	return []faultCall{
		{"CreateVolume", func(ctx context.Context, conn, tag string) error {
			_, err := p.Controller.CreateVolume(ctx, createReq("pvc-"+tag, map[string]string{"connection": conn}))
			return err
		}},
		{"DeleteVolume", func(ctx context.Context, conn, tag string) error {
			_, err := p.Controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "v:" + conn + "/vol-" + tag})
			return err
		}},
		{"GetCapacity", func(ctx context.Context, conn, _ string) error {
			_, err := p.Controller.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: map[string]string{"connection": conn}})
			return err
		}},
		{"NodePublishVolume", func(ctx context.Context, conn, tag string) error {
			_, err := p.Node.NodePublishVolume(ctx, publishReq("v:"+conn+"/vol-"+tag))
			return err
		}},
	}
}

// faultEditSteps are the ways the loop changes c.yaml; the first leaves it
// valid. Writes in place (os.WriteFile truncates first) are seen half-done
// by concurrent readers, which is part of the point.
func faultEditSteps(t *testing.T, path, ep1, ep2 string) []func() {
	write := func(content string) func() {
		return func() {
			removePath(path)
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Error(err)
			}
		}
	}
	rename := func(content string) func() {
		return func() {
			tmp := path + ".tmp"
			if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
				t.Error(err)
			}
			removePath(path)
			if err := os.Rename(tmp, path); err != nil {
				t.Error(err)
			}
		}
	}
	valid1, valid2 := faultConn(ep1), faultConn(ep2)
	return []func(){
		write(valid1),
		rename(valid2), // another upstream, a new inode
		func() { // truncated
			if err := os.Truncate(path, 0); err != nil {
				write("")()
			}
		},
		write(valid2[:len(valid2)/2]), // cut short
		write(valid1),
		write("csi: [unterminated\n"),
		write(valid2),
		write("driver: proxy\n"),
		rename(valid1),
		write(faultConn("Unix:relative.sock")),
		write(valid2),
		func() { removePath(path) }, // deleted
		rename(valid1),              // restored
		func() {
			removePath(path)
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Error(err)
			}
		},
		write(valid2),
		func() {
			removePath(path)
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Error(err)
			}
		},
		rename(valid1),
		write(valid1[:len(valid1)-2]), // "driver: c"
		write(valid2),
	}
}

// removePath removes whatever is at path: a file, a FIFO or an empty directory.
func removePath(path string) {
	_ = os.Remove(path)
}

// probeOK fails the test unless the proxy answers Probe ready.
func probeOK(t *testing.T, p *testProxy) {
	t.Helper()
	resp, err := p.Identity.Probe(callCtx(t), &csi.ProbeRequest{})
	if err != nil || !resp.GetReady().GetValue() {
		t.Fatalf("Probe = %v, %v; want ready", resp, err)
	}
}
