package connection

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestInspectSaysWhatGetSays: Inspect reads a connection or a group's
// member as Get and Member do, with the same sentinel and the same
// message, but makes no upstream client, so the topology dry run predicts
// the server's answer without touching an upstream or a base path.
func TestInspectSaysWhatGetSays(t *testing.T) {
	e := newEnv(t, -1)
	e.Write("a", connA)
	e.Write("disk", "driver: local-hostpath\nlocal-hostpath:\n  shareBasePath: "+e.Dir+"/never-made\n")
	e.Write("broken", "driver: csi\n")
	e.Write("self", "driver: group\ngroup:\n  members: [a, self]\n")
	e.Write("inner", "driver: group\ngroup:\n  members: [a]\n")
	e.Write("g", "driver: group\ngroup:\n  members: [a, missing, broken, inner, disk]\n")
	src, opts := NewFolderSource(e.Dir), e.store.opts.Topology
	if _, err := Inspect(src, "disk", opts); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e.Dir + "/never-made"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Inspect touched the built-in driver's base path: stat: %v", err)
	}
	for _, name := range []string{"a", "disk", "missing", "broken", "self", "../a", "g"} {
		got, gotErr := Inspect(src, name, opts)
		want, wantErr := e.store.Get(context.Background(), name)
		if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
			t.Errorf("Inspect(%q) error %v, Get's %v", name, gotErr, wantErr)
		}
		for _, sentinel := range []error{ErrInvalidName, ErrNotFound, ErrBroken} {
			if errors.Is(gotErr, sentinel) != errors.Is(wantErr, sentinel) {
				t.Errorf("Inspect(%q) error %v: errors.Is(%v) differs from Get's", name, gotErr, sentinel)
			}
		}
		if want == nil {
			continue
		}
		want.Release()
		if got.Attachment() != nil {
			t.Errorf("Inspect(%q) has an attachment", name)
		}
		if d := cmp.Diff(want.Config, got.Config); d != "" || got.Name != want.Name || got.File != want.File || got.Topology(opts).NodeLocal() != want.Topology(opts).NodeLocal() {
			t.Errorf("Inspect(%q) differs from Get (-get +inspect):\n%s", name, d)
		}
	}

	g, err := Inspect(src, "g", opts)
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range g.Members() {
		got, gotErr := InspectMember(src, g, i, opts)
		want, wantErr := Member(g, i, func(name string) (*Connection, error) { return e.store.Get(context.Background(), name) })
		if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
			t.Errorf("InspectMember(%q) error %v, Member's %v", name, gotErr, wantErr)
		}
		if want != nil {
			want.Release()
			if got.Name != name || got.Attachment() != nil {
				t.Errorf("InspectMember(%q) = %+v", name, got)
			}
		}
	}
}
