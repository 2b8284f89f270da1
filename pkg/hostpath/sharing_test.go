package hostpath

import (
	"strings"
	"testing"
)

// TestCanShareTree: which drivers may serve one base path at once — the
// rule the upstream pool applies to connections (TestLocalConflict there).
func TestCanShareTree(t *testing.T) {
	base := Options{BasePath: "/data/x", NodeID: "n1", Stage: true}
	for _, tc := range []struct {
		name  string
		other Options
		want  string // "" : may share
	}{
		{"same settings", base, ""},
		{"another node id", Options{BasePath: "/data/x", NodeID: "n2", Stage: true}, ""},
		{"shared", Options{BasePath: "/data/x/", NodeID: "n1", Stage: true, Shared: true}, ""},
		{"another base path", Options{BasePath: "/data/y", NodeID: "n1"}, ""},
		{"stage differs", Options{BasePath: "/data/./x", NodeID: "n1"}, "shareBasePath /data/x is already served with stage=false controllerPublish=false"},
		{"controllerPublish differs", Options{BasePath: "/data/x", NodeID: "n1", Stage: true, ControllerPublish: true}, "stage=true controllerPublish=true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := base.CanShareTree(&tc.other)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("CanShareTree = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("CanShareTree = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestSettings: equal options give equal Settings, and each setting other
// than the base path changes it.
func TestSettings(t *testing.T) {
	base := Options{BasePath: "/data/x", NodeID: "n1", Stage: true}
	same := base
	same.BasePath = "/other"
	if base.Settings() != same.Settings() {
		t.Errorf("Settings differ for options that differ only in base path: %q, %q", base.Settings(), same.Settings())
	}
	for _, edit := range []func(*Options){
		func(o *Options) { o.NodeID = "n2" },
		func(o *Options) { o.Stage = false },
		func(o *Options) { o.ControllerPublish = true },
		func(o *Options) { o.Shared = true },
	} {
		o := base
		edit(&o)
		if o.Settings() == base.Settings() {
			t.Errorf("Settings %q unchanged by an edit", o.Settings())
		}
	}
}
