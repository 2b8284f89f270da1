package csi_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/internal/testkit"
	"github.com/democratic-csi/proxy-topology/pkg/accessible"
	"github.com/democratic-csi/proxy-topology/pkg/ids"
)

// maxMessage bounds any error message the proxy makes from hostile input:
// messages end up in Kubernetes events and logs, and must not echo
// kilobytes of what a caller sent.
const maxMessage = 1024

// hostileNames are connection names no file may ever be looked up for.
// (Invalid UTF-8 cannot even be sent: proto3 strings must be UTF-8, and
// gRPC refuses to marshal or unmarshal them.)
var hostileNames = map[string]string{
	"dot-dot":        "..",
	"parent path":    "../decoy",
	"slash":          "sub/decoy",
	"absolute":       "/etc/passwd",
	"NUL":            "decoy\x00",
	"NUL inside":     "de\x00coy",
	"10 KiB":         strings.Repeat("d", 10<<10),
	"64 bytes":       strings.Repeat("d", 64),
	"unicode":        "décoy",
	"unicode only":   "日本",
	"leading dot":    ".decoy",
	"leading dash":   "-decoy",
	"space":          "de coy",
	"newline":        "decoy\n",
	"backslash":      `..\decoy`,
	"percent-encode": "%2e%2e",
}

// TestHostileConnectionNames: a connection name that can never be valid
// is INVALID_ARGUMENT with a short message when it comes as a parameter,
// and an ID carrying it was never made by the proxy (NOT_FOUND, or
// success for the idempotent deletes). No such name ever reaches the file
// system: decoy connection files where a path escape would lead are never
// used.
func TestHostileConnectionNames(t *testing.T) {
	decoy := newFakeUpstream(t)
	p := startProxy(t)
	// Where "../decoy", "sub/decoy" and friends would lead if a name were
	// ever joined to the folder as it is.
	decoyFile := "driver: csi\ncsi:\n  endpoint: " + decoy.Endpoint + "\n"
	for _, path := range []string{
		filepath.Join(p.Folder, "..", "decoy.yaml"),
		filepath.Join(p.Folder, "sub", "decoy.yaml"),
		filepath.Join(p.Folder, "...yaml"),
		filepath.Join(p.Folder, ".decoy.yaml"),
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(decoyFile), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for name, conn := range hostileNames {
		t.Run(name, func(t *testing.T) {
			ctx := callCtx(t)
			params := map[string]string{"connection": conn}
			_, err := p.Controller.CreateVolume(ctx, createReq("pvc-1", params))
			testkit.WantCode(t, err, codes.InvalidArgument, "connection name")
			wantShort(t, err)
			_, err = p.Controller.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: params})
			testkit.WantCode(t, err, codes.InvalidArgument, "connection name")
			wantShort(t, err)
			for _, rc := range routedCalls {
				id := idOf(rc.method, conn, "h-1")
				err := rc.call(ctx, p, id)
				if parsed, perr := ids.Parse(ids.Kind(id[0]), id); perr == nil {
					// "v:sub/decoy/h-1" is connection "sub", handle
					// "decoy/h-1": a valid ID of a connection without a file.
					testkit.WantCode(t, err, codes.FailedPrecondition, fmt.Sprintf("connection %q has no file", parsed.Connection))
					continue
				}
				if rc.tolerant {
					if err != nil {
						t.Errorf("%s: got %v, want success (the proxy never made this ID)", rc.method, err)
					}
					continue
				}
				if status.Code(err) != codes.NotFound {
					t.Errorf("%s: got %v, want NotFound", rc.method, err)
				}
				wantShort(t, err)
			}
			probeOK(t, p)
		})
	}
	if got := decoy.routed(); len(got) != 0 {
		t.Errorf("a decoy connection file outside the folder was used: %v", got)
	}
}

// TestHostileIDs: IDs that are malformed, over-long, carry NUL or invalid
// UTF-8, or name a connection without a file never reach an upstream and
// get a precise status with a short message.
func TestHostileIDs(t *testing.T) {
	f := newFakeUpstream(t)
	p := startProxy(t)
	p.add(t, "a", conn{Endpoint: f.Endpoint})
	tests := []struct {
		name, handle string
		conn         string // default "a"
		// code for the calls that are not tolerant; the tolerant ones
		// succeed unless tolerantCode is set.
		code, tolerantCode codes.Code
		msg                string
	}{
		{name: "10 KiB handle", handle: strings.Repeat("h", 10<<10), code: codes.NotFound, msg: "longer than any the proxy makes"},
		{name: "handle one byte over MaxHandle", handle: strings.Repeat("h", ids.MaxHandle+1), code: codes.NotFound, msg: "1025 bytes, longer than any the proxy makes (1024)"},
		{name: "unknown connection", conn: "nope", handle: "h-1", code: codes.FailedPrecondition, tolerantCode: codes.FailedPrecondition, msg: `connection "nope" has no file`},
		{name: "unknown connection, 63 bytes", conn: strings.Repeat("n", 63), handle: "h", code: codes.FailedPrecondition, tolerantCode: codes.FailedPrecondition, msg: "has no file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.conn
			if c == "" {
				c = "a"
			}
			ctx := callCtx(t)
			for _, rc := range routedCalls {
				err := rc.call(ctx, p, idOf(rc.method, c, tt.handle))
				want := tt.code
				if rc.tolerant {
					want = tt.tolerantCode
				}
				if want == codes.OK {
					if err != nil {
						t.Errorf("%s: got %v, want success", rc.method, err)
					}
					continue
				}
				if st := status.Convert(err); st.Code() != want || !strings.Contains(st.Message(), tt.msg) {
					t.Errorf("%s: got %v %q, want %v …%s…", rc.method, st.Code(), st.Message(), want, tt.msg)
				}
				wantShort(t, err)
			}
			if got := f.routed(); len(got) != 0 {
				t.Errorf("upstream received %v", got)
			}
			probeOK(t, p)
		})
	}
	// NUL, control bytes and unicode in the handle are the upstream's
	// business: the proxy forwards them unchanged.
	for _, handle := range []string{"h\x00", "ünï/cöde", "h\n\t"} {
		f := newFakeUpstream(t)
		p.add(t, "b", conn{Endpoint: f.Endpoint})
		if _, err := p.Controller.ControllerExpandVolume(callCtx(t), &csi.ControllerExpandVolumeRequest{
			VolumeId: "v:b/" + handle, CapacityRange: &csi.CapacityRange{RequiredBytes: 1}}); err != nil {
			t.Errorf("handle %q: %v", handle, err)
		}
		if got := only[*csi.ControllerExpandVolumeRequest](t, f, "ControllerExpandVolume").GetVolumeId(); got != handle {
			t.Errorf("upstream received handle %q, want %q", got, handle)
		}
	}
	// A content source from an unknown or hostile connection.
	for _, src := range []string{"s:nope/h", "s:../h", "s:a/" + strings.Repeat("h", 10<<10), "v:a/h"} {
		req := createReq("pvc-src", map[string]string{"connection": "a"})
		req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: src}}}
		_, err := p.Controller.CreateVolume(callCtx(t), req)
		if c := status.Code(err); c != codes.NotFound && c != codes.InvalidArgument {
			t.Errorf("snapshot source %.20q: got %v, want NotFound or InvalidArgument", src, err)
		}
		wantShort(t, err)
	}
	if got := f.routed(); len(got) != 0 {
		t.Errorf("upstream received %v", got)
	}
}

// TestOversizedMaps: the CSI spec caps a map field at 4 KiB, but the proxy
// does not enforce that: Kubernetes does not either, real secrets (a CA
// bundle, a kubeconfig) exceed it, and merging the connection's defaults
// may push a map over it that was under it as sent. The proxy forwards
// such maps unchanged and lets the upstream judge them. What bounds them is
// gRPC's 4 MiB message limit, enforced before any handler runs.
func TestOversizedMaps(t *testing.T) {
	f := newFakeUpstream(t)
	p := startProxy(t)
	p.add(t, "a", conn{Endpoint: f.Endpoint, Secrets: map[string]string{"conn-key": secretMarker + strings.Repeat("c", 8<<10)}})

	big := func(n, size int, prefix string) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprintf("%s-%04d-%s", prefix, i, strings.Repeat("k", 100))] = prefix + strings.Repeat("v", size)
		}
		return m
	}
	params := big(64, 1<<10, "p")                  // 64 KiB of parameters, 200-byte keys
	secrets := big(64, 1<<10, secretMarker+"-req") // 64 KiB of secrets
	params["connection"] = "a"
	req := createReq("pvc-big", params)
	req.Secrets = secrets
	if _, err := p.Controller.CreateVolume(callCtx(t), req); err != nil {
		t.Fatalf("CreateVolume with 64 KiB maps: %v", err)
	}
	up := only[*csi.CreateVolumeRequest](t, f, "CreateVolume")
	if len(up.GetParameters()) != 64 || len(up.GetSecrets()) != 65 {
		t.Errorf("upstream received %d parameters and %d secrets, want 64 and 65", len(up.GetParameters()), len(up.GetSecrets()))
	}
	for k, v := range secrets {
		if up.GetSecrets()[k] != v {
			t.Fatalf("secret %.20q was not forwarded intact", k)
		}
	}

	// Over gRPC's default 4 MiB receive limit: refused before the handler.
	huge := createReq("pvc-huge", map[string]string{"connection": "a", "blob": strings.Repeat("x", 5<<20)})
	huge.Secrets = map[string]string{"pw": secretMarker + strings.Repeat("y", 1<<10)}
	_, err := p.Controller.CreateVolume(callCtx(t), huge)
	testkit.WantCode(t, err, codes.ResourceExhausted, "larger than max")
	wantShort(t, err)
	if n := len(f.requests("CreateVolume")); n != 1 {
		t.Errorf("upstream received %d CreateVolume calls, want the first only", n)
	}
	probeOK(t, p)
}

// TestHugeRequisite: thousands of requisite terms (one per node in a big
// cluster) or of segments in one term, and segment values far over any
// label limit, are decided in bounded time, with a short
// RESOURCE_EXHAUSTED message when nothing matches.
func TestHugeRequisite(t *testing.T) {
	f := newFakeUpstream(t)
	p := startProxy(t)
	zone := testPrefix + "/zone"
	p.add(t, "a", conn{Endpoint: f.Endpoint, Topology: []accessible.Entry{{Requirements: map[string]string{"zone": "z1"}}}})

	manyTerms := func(n int, last *csi.Topology) []*csi.Topology {
		out := make([]*csi.Topology, 0, n+1)
		for i := range n {
			out = append(out, topo(zone, fmt.Sprintf("z%d", i+2), testPrefix+"/node", fmt.Sprintf("node-%d", i), "kubernetes.io/hostname", fmt.Sprintf("node-%d", i)))
		}
		if last != nil {
			out = append(out, last)
		}
		return out
	}
	manySegments := func(n int, zoneValue string) *csi.Topology {
		m := map[string]string{zone: zoneValue}
		for i := range n {
			m[fmt.Sprintf("example.com/key-%d", i)] = fmt.Sprintf("value-%d", i)
		}
		return &csi.Topology{Segments: m}
	}
	longValue := strings.Repeat("z", 256<<10)
	tests := []struct {
		name      string
		requisite []*csi.Topology
		preferred []*csi.Topology
		ok        bool
		code      codes.Code // when not OK: an error other than RESOURCE_EXHAUSTED
		msg       string
	}{
		{name: "5000 terms, none served", requisite: manyTerms(5000, nil), msg: "and 4995 more"},
		{name: "5000 terms, the last served", requisite: manyTerms(5000, topo(zone, "z1")), ok: true},
		{name: "5000 preferred terms only, none served", preferred: manyTerms(5000, nil), msg: "(preferred) is accessible"},
		{name: "one term of 5000 segments", requisite: []*csi.Topology{manySegments(5000, "z9")}, msg: "and 4993 more"},
		{name: "one term of 5000 segments, served", requisite: []*csi.Topology{manySegments(5000, "z1")}, ok: true},
		{name: "256 KiB segment value", requisite: []*csi.Topology{topo(zone, longValue)}, msg: "…(262144 bytes)} (requisite) is not accessible"},
		// A key the connection's topology does not mention narrows the
		// result (SPEC §8), so it must be a label key Kubernetes accepts.
		{name: "256 KiB segment key", requisite: []*csi.Topology{topo(longValue, "z9")}, code: codes.InvalidArgument, msg: "is not a valid label key (name part must be no more than 63 bytes"},
		{name: "256 KiB segment key and a zone not served", requisite: []*csi.Topology{topo(longValue, "z1", zone, "z9")}, msg: "(262144 bytes)=z1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := createReq("pvc-topo", map[string]string{"connection": "a"})
			req.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: tt.requisite, Preferred: tt.preferred}
			start := time.Now()
			resp, err := p.Controller.CreateVolume(callCtx(t), req)
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v", d)
			}
			if tt.ok {
				if err != nil {
					t.Fatal(err)
				}
				// The term's other segments narrow the result (SPEC §8).
				want := &csi.Topology{Segments: map[string]string{zone: "z1"}}
				for _, term := range tt.requisite {
					if term.GetSegments()[zone] == "z1" {
						want = term
					}
				}
				if d := diff([]*csi.Topology{want}, resp.GetVolume().GetAccessibleTopology()); d != "" {
					t.Errorf("accessible_topology (-want +got):\n%s", d)
				}
			} else if tt.code != codes.OK {
				testkit.WantCode(t, err, tt.code, tt.msg)
				wantShort(t, err)
			} else {
				testkit.WantCode(t, err, codes.ResourceExhausted, `for connection "a" (it offers [{`+zone+`=z1}])`, tt.msg)
				wantShort(t, err)
			}
			probeOK(t, p)
		})
	}
}

// wantShort fails if err's message is longer than maxMessage.
func wantShort(t *testing.T, err error) {
	t.Helper()
	if msg := status.Convert(err).Message(); len(msg) > maxMessage {
		t.Errorf("message is %d bytes, over %d: %.200q…", len(msg), maxMessage, msg)
	}
}
