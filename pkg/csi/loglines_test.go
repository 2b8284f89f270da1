package csi_test

import (
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
)

// TestLogLinesBounded (issue 38, probe 7): a 100 KB connection name or a
// 120 KB volume ID from a caller was logged verbatim (a 4 MiB request, a
// 4 MiB line). The RPC log line and the handlers' lines cut caller
// strings and state their full length.
func TestLogLinesBounded(t *testing.T) {
	p := startProxy(t)
	longName := strings.Repeat("a", 100000)
	longID := "v:a/" + strings.Repeat("b", 120000)
	_, _ = p.Controller.CreateVolume(callCtx(t), createReq(strings.Repeat("n", 50000), map[string]string{"connection": longName}))
	_, _ = p.Controller.DeleteVolume(callCtx(t), &csi.DeleteVolumeRequest{VolumeId: longID})
	logs := p.Logs.String()
	var rpc, notOurs string
	for _, l := range strings.Split(logs, "\n") {
		if len(l) > 20000 {
			t.Errorf("a log line of %d bytes: %.200s…", len(l), l)
		}
		switch {
		case strings.Contains(l, `"msg":"rpc"`) && strings.Contains(l, `"method":"CreateVolume"`):
			rpc = l
		case strings.Contains(l, "not made by this driver"):
			notOurs = l
		}
	}
	if !strings.Contains(rpc, `"connection":"aaaa`) || !strings.Contains(rpc, "…(100000 bytes)") || len(rpc) > 2000 {
		t.Errorf("the CreateVolume line does not cut the connection name: %.400s (%d bytes)", rpc, len(rpc))
	}
	if !strings.Contains(notOurs, "…(120004 bytes)") || len(notOurs) > 1000 {
		t.Errorf("the DeleteVolume line does not cut the volume ID: %.400s (%d bytes)", notOurs, len(notOurs))
	}
}
