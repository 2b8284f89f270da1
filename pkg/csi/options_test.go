package csi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/democratic-csi/proxy-topology/internal/testproxy"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
)

// TestOptionsValidate: New refuses options it cannot serve with, each
// error naming the option and the flag or config key that sets it; the
// zero values that have defaults pass.
func TestOptionsValidate(t *testing.T) {
	reg := testproxy.Start(t, testproxy.Config{}).Registry
	ok := pcsi.Options{Connections: reg, NodeID: "n1"}
	for _, tc := range []struct {
		name string
		edit func(*pcsi.Options)
		want []string // each in the error; none: valid
	}{
		{"defaults", func(*pcsi.Options) {}, nil},
		{"controller without node id", func(o *pcsi.Options) { o.Mode, o.NodeID = pcsi.ModeController, "" }, nil},
		{"no connections", func(o *pcsi.Options) { o.Connections = nil }, []string{"Connections is required"}},
		{"bad mode", func(o *pcsi.Options) { o.Mode = "both" }, []string{`--mode "both"`}},
		{"node without node id", func(o *pcsi.Options) { o.Mode, o.NodeID = pcsi.ModeNode, "" }, []string{"--node-id"}},
		{"negative max volumes", func(o *pcsi.Options) { o.MaxVolumesPerNode = -1 }, []string{"proxy.maxVolumesPerNode -1"}},
		{"negative max id length", func(o *pcsi.Options) { o.MaxIDLength = -5 }, []string{"proxy.maxIdLength -5"}},
		{"negative timeouts", func(o *pcsi.Options) { o.ListTimeout, o.RollbackTimeout = -time.Second, -time.Minute },
			[]string{"ListTimeout -1s", "RollbackTimeout -1m0s"}},
		{"negative pages", func(o *pcsi.Options) { o.MaxListPages = -1 }, []string{"MaxListPages -1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			tc.edit(&o)
			err := o.Validate()
			if _, nerr := pcsi.New(o); (nerr == nil) != (err == nil) {
				t.Errorf("New = %v but Validate = %v", nerr, err)
			}
			if len(tc.want) == 0 {
				if err != nil {
					t.Errorf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate = nil, want an error naming %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate = %q, want it to name %q", err, w)
				}
			}
		})
	}
}
