package config

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseGroup(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		members    []string
		errs       []string // each must appear in the error
	}{
		{name: "three members", data: "driver: group\ngroup:\n  members: [nas-zone1, nas-zone2, nas-zone3]\n",
			members: []string{"nas-zone1", "nas-zone2", "nas-zone3"}},
		{name: "block list and a trailing document marker", data: "driver: group\ngroup:\n  members:\n  - a\n  - b\n---\n",
			members: []string{"a", "b"}},
		{name: "no members", data: "driver: group\n", errs: []string{"file g.yaml: group.members: required"}},
		{name: "empty members", data: "driver: group\ngroup: {members: []}\n", errs: []string{"group.members: required"}},
		{name: "bad member name", data: "driver: group\ngroup: {members: [ok, ../etc]}\n", errs: []string{"group.members[1]:"}},
		{name: "empty member name", data: "driver: group\ngroup: {members: [\"\"]}\n", errs: []string{"group.members[0]: connection name is empty"}},
		{name: "duplicate member", data: "driver: group\ngroup: {members: [a, b, a]}\n", errs: []string{`group.members[2]: "a" is already group.members[0]`}},
		{name: "a topology of its own", data: "driver: group\ngroup: {members: [a]}\nproxy:\n  perDriver:\n    topology: [{requirements: {zone: z1}}]\n",
			errs: []string{"proxy: not a key of a group file"}},
		{name: "another driver's keys", data: "driver: group\ngroup: {members: [a]}\ncsi: {endpoint: unix:///x.sock}\n",
			errs: []string{"csi: not a key of a group file"}},
		{name: "misspelt members", data: "driver: group\ngroup: {member: [a]}\n", errs: []string{"group.member: unknown key"}},
		{name: "members not a list", data: "driver: group\ngroup: {members: a}\n", errs: []string{"file g.yaml:", `group.members: line 2: want a list, each item a string; got a string ("a")`}},
		{name: "second document", data: "driver: group\ngroup: {members: [a]}\n---\ndriver: csi\n", errs: []string{"a second YAML document"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !IsGroupFile([]byte(tc.data)) {
				t.Fatalf("IsGroupFile = false")
			}
			g, err := ParseGroup("g.yaml", []byte(tc.data))
			if len(tc.errs) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.members, g.Group.Members); diff != "" {
					t.Errorf("members (-want +got):\n%s", diff)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tc.errs)
			}
			for _, e := range tc.errs {
				if !strings.Contains(err.Error(), e) {
					t.Errorf("error %q does not contain %q", err, e)
				}
			}
		})
	}
}

func TestIsGroupFile(t *testing.T) {
	for data, want := range map[string]bool{
		"driver: group\n":                     true,
		"driver: csi\ncsi: {endpoint: x}\n":   false,
		"driver: [group\n":                    false, // broken YAML: the ordinary parser says why
		"":                                    false,
		"group: {members: [a]}\n":             false, // no driver: an ordinary file missing its driver
		"driver: Group\ngroup: {members: []}": false,
	} {
		if got := IsGroupFile([]byte(data)); got != want {
			t.Errorf("IsGroupFile(%q) = %v, want %v", data, got, want)
		}
	}
	g := &Group{Driver: DriverGroup, Group: GroupMembers{Members: []string{"a", "g"}}}
	if g.SelfMember("g") != 1 || g.SelfMember("x") != -1 {
		t.Errorf("SelfMember")
	}
}

// FuzzParseGroup: no group file content may crash the proxy; a group that
// parses validates, has members, and every error names the file.
func FuzzParseGroup(f *testing.F) {
	f.Add([]byte("driver: group\ngroup:\n  members: [a, b, c]\n"))
	f.Add([]byte("driver: group\ngroup: {members: [a, a]}\ncsi: {}\n"))
	f.Add([]byte("driver: group\ngroup: &g {members: *g}\n"))
	f.Add([]byte("driver: group\n---\ndriver: csi\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := ParseGroup("fuzz.yaml", data)
		if err != nil {
			// A group comes with an error only when it decoded and does
			// not validate (ParseGroup's doc: check goes on to its
			// members); the error is then the validation's.
			if g != nil && g.Validate() == nil {
				t.Fatalf("error %v with a group that validates", err)
			}
			if !strings.HasPrefix(err.Error(), "file fuzz.yaml: ") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if verr := g.Validate(); verr != nil || len(g.Group.Members) == 0 {
			t.Fatalf("parsed group does not validate: %v (%v)", verr, g.Group.Members)
		}
	})
}
