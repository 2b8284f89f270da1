package hostpath

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

func TestParseMountInfo(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []mountInfo
		wantErr string
	}{
		{
			name: "proc(5) example with optional field",
			in:   "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n",
			want: []mountInfo{{ID: 36, Parent: 35, Major: 98, Minor: 0, Root: "/mnt1", MountPoint: "/mnt2",
				Options: "rw,noatime", FSType: "ext3", Source: "/dev/root", SuperOptions: "rw,errors=continue"}},
		},
		{
			name: "no optional fields, several optional fields, escapes",
			in: "22 27 0:21 / /proc rw,relatime - proc proc rw\n" +
				"42 27 254:0 /base/volumes/vol-1 /var/lib/kubelet/pods/a\\040b/mount ro,relatime shared:1 master:2 propagate_from:3 - ext4 /dev/vda rw\n" +
				"43 27 254:0 /back\\134slash /tab\\011and\\012newline rw - ext4 /dev/vda rw\n",
			want: []mountInfo{
				{ID: 22, Parent: 27, Major: 0, Minor: 21, Root: "/", MountPoint: "/proc", Options: "rw,relatime", FSType: "proc", Source: "proc", SuperOptions: "rw"},
				{ID: 42, Parent: 27, Major: 254, Minor: 0, Root: "/base/volumes/vol-1", MountPoint: "/var/lib/kubelet/pods/a b/mount",
					Options: "ro,relatime", FSType: "ext4", Source: "/dev/vda", SuperOptions: "rw"},
				{ID: 43, Parent: 27, Major: 254, Minor: 0, Root: `/back\slash`, MountPoint: "/tab\tand\nnewline",
					Options: "rw", FSType: "ext4", Source: "/dev/vda", SuperOptions: "rw"},
			},
		},
		{name: "empty", in: "", want: nil},
		{name: "no separator", in: "1 2 3:4 / /x rw shared:1 ext4 /dev/x rw more\n", wantErr: "line 1"},
		{name: "too short", in: "1 2 3:4 / /x rw - ext4\n", wantErr: "unexpected format"},
		{name: "bad id", in: "x 2 3:4 / /x rw - ext4 /dev/x rw\n", wantErr: "mount id"},
		{name: "bad device", in: "1 2 34 / /x rw - ext4 /dev/x rw\n", wantErr: "major:minor"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMountInfo(strings.NewReader(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if (&mountInfo{Options: "ro,nosuid"}).readOnly() != true || (&mountInfo{Options: "rw,errors=ro"}).readOnly() {
		t.Error("readOnly misreads options")
	}
}

func TestReadMountInfoOfThisProcess(t *testing.T) {
	mounts, err := readMountInfo()
	if err != nil {
		t.Fatal(err)
	}
	if mountAt(mounts, "/") == nil {
		t.Errorf("no mount at / among %d mounts", len(mounts))
	}
}

func TestMountFlags(t *testing.T) {
	tests := []struct {
		opts     []string
		flags    uintptr
		readonly bool
		err      string
	}{
		{nil, 0, false, ""},
		{[]string{"rw", "bind", "defaults", ""}, 0, false, ""},
		{[]string{"ro"}, 0, true, ""},
		{[]string{" nosuid ", "nodev", "noexec"}, unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, false, ""},
		{[]string{"noatime", "ro"}, unix.MS_NOATIME, true, ""},
		{[]string{"discard", "nosuid", "vers=4"}, 0, false, `unsupported flag(s) ["discard" "vers=4"]`},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.opts, ","), func(t *testing.T) {
			flags, ro, err := mountFlags(tc.opts)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || flags != tc.flags || ro != tc.readonly {
				t.Errorf("mountFlags = %#x, %t, %v; want %#x, %t", flags, ro, err, tc.flags, tc.readonly)
			}
		})
	}
}
