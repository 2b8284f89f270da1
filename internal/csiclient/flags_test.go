package csiclient

import (
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
)

func TestSizes(t *testing.T) {
	for in, want := range map[string]int64{"1Gi": 1 << 30, "512Mi": 512 << 20, "10G": 10e9, "1k": 1000, "4096": 4096, "0": 0} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "Gi", "-1Gi", "1.5Gi", "99999999999Ti"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) accepted", bad)
		}
	}
	for in, want := range map[int64]string{1 << 30: "1Gi", 3 << 20: "3Mi", 1536 << 20: "1.5Gi", 1000: "1000", 0: "0", 83736616960: "78.0Gi"} {
		if got := formatSize(in); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestGRPCTarget(t *testing.T) {
	for in, want := range map[string]string{
		"unix:///run/csi/csi.sock": "unix:///run/csi/csi.sock",
		"/run/csi/csi.sock":        "unix:///run/csi/csi.sock",
		"tcp://127.0.0.1:10000":    "dns:///127.0.0.1:10000",
	} {
		if got, err := grpcTarget(in); err != nil || got != want {
			t.Errorf("grpcTarget(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := grpcTarget("csi.sock"); err == nil {
		t.Error("a relative path was accepted")
	}
}

func TestParseTerm(t *testing.T) {
	for in, want := range map[string]map[string]string{
		"zone=zone1":                    {"p.example.com/zone": "zone1"},
		"zone=zone1, rack=r7":           {"p.example.com/zone": "zone1", "p.example.com/rack": "r7"},
		"topology.kubernetes.io/zone=a": {"topology.kubernetes.io/zone": "a"},
		"zone=":                         {"p.example.com/zone": ""},
	} {
		got, err := ParseTerm(in, "p.example.com")
		if err != nil {
			t.Errorf("ParseTerm(%q): %v", in, err)
			continue
		}
		if diff := cmp.Diff(&csi.Topology{Segments: want}, got, protocmp.Transform()); diff != "" {
			t.Errorf("ParseTerm(%q) (-want +got):\n%s", in, diff)
		}
	}
	for _, bad := range []string{"", "zone", "=x", "zone=a,", "zone=a,,rack=b", "zone=a,zone=b", "zone=a,zone=a", "zone=a,p/zone=b"} {
		if _, err := ParseTerm(bad, "p"); err == nil {
			t.Errorf("ParseTerm(%q) accepted", bad)
		}
	}
}

func TestFormatTerms(t *testing.T) {
	terms := []*csi.Topology{
		{Segments: map[string]string{"b/zone": "z2", "a/rack": "r1"}},
		{Segments: map[string]string{"b/zone": "z1"}},
	}
	if got, want := FormatTerms(terms), "[{a/rack=r1, b/zone=z2} OR {b/zone=z1}]"; got != want {
		t.Errorf("FormatTerms = %q, want %q", got, want)
	}
	if got := FormatTerms(nil); got != "[]" {
		t.Errorf("FormatTerms(nil) = %q", got)
	}
}

func TestKVFlag(t *testing.T) {
	m := kvFlag{}
	for _, s := range []string{"a=1", "b=x=y", "a=2", "c="} {
		if err := m.Set(s); err != nil {
			t.Fatalf("Set(%q): %v", s, err)
		}
	}
	if diff := cmp.Diff(kvFlag{"a": "2", "b": "x=y", "c": ""}, m); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for _, bad := range []string{"a", "=1"} {
		if err := m.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted", bad)
		}
	}
}
