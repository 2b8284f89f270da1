package csiclient

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/spf13/pflag"

	"github.com/democratic-csi/proxy-topology/pkg/labels"
)

// kvFlag collects repeatable k=v flags (--param, --secret) into a map; a
// later value for a key wins.
type kvFlag map[string]string

func (m kvFlag) String() string { return formatMap(m) }
func (m kvFlag) Type() string   { return "k=v" }
func (m kvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want key=value", s)
	}
	m[k] = v
	return nil
}

// sizeFlag is a byte count written as 1Gi, 500Mi, 10G or 1073741824.
type sizeFlag int64

func (s *sizeFlag) String() string { return formatSize(int64(*s)) }
func (s *sizeFlag) Type() string   { return "size" }
func (s *sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	*s = sizeFlag(n)
	return err
}

// sizeUnits: binary units first, so that formatSize can use the first four.
var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10},
	{"T", 1e12}, {"G", 1e9}, {"M", 1e6}, {"K", 1e3}, {"k", 1e3},
}

func parseSize(s string) (int64, error) {
	num, mult := s, int64(1)
	for _, u := range sizeUnits {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q: want a size like 1Gi, 500Mi, 10G or a byte count", s)
	}
	return n * mult, nil
}

// formatSize prints b in the largest binary unit it reaches: exact when
// the unit divides it (1Gi), else to one decimal (78.1Gi).
func formatSize(b int64) string {
	for _, u := range sizeUnits[:4] {
		switch {
		case b < u.mult:
			continue
		case b%u.mult == 0:
			return strconv.FormatInt(b/u.mult, 10) + u.suffix
		default:
			return strconv.FormatFloat(float64(b)/float64(u.mult), 'f', 1, 64) + u.suffix
		}
	}
	return strconv.FormatInt(b, 10)
}

// termsFlag collects repeatable topology terms. They are parsed after all
// flags, so --prefix applies wherever it is given.
type termsFlag []string

func (t *termsFlag) String() string     { return strings.Join(*t, " ") }
func (t *termsFlag) Type() string       { return "k=v,k=v" }
func (t *termsFlag) Set(s string) error { *t = append(*t, s); return nil }

func (t termsFlag) terms(flagName, prefix string) ([]*csi.Topology, error) {
	var out []*csi.Topology
	for _, s := range t {
		seg, err := ParseTerm(s, prefix)
		if err != nil {
			return nil, usagef("--%s: %v", flagName, err)
		}
		out = append(out, seg)
	}
	return out, nil
}

// ParseTerm reads one topology term, k=v,k=v. A key without '/' gets the
// prefix, as node rules do (labels.FullKey); a key with one is used as it
// is. A key given twice is refused: a term holds one value a key (a
// Kubernetes topology term ANDs its segments), and "zone=a,zone=b" is not
// "zone a or b", which is two terms.
func ParseTerm(s, prefix string) (*csi.Topology, error) {
	seg := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q: want k=v,k=v", s)
		}
		full := labels.FullKey(prefix, k)
		if _, dup := seg[full]; dup {
			return nil, fmt.Errorf("%q: key %s twice; a term has one value a key (for one value or another, give one term each: the flag twice)", s, full)
		}
		seg[full] = v
	}
	return &csi.Topology{Segments: seg}, nil
}

// accessModes maps single-node-writer to SINGLE_NODE_WRITER and so on.
func accessModes() map[string]csi.VolumeCapability_AccessMode_Mode {
	out := map[string]csi.VolumeCapability_AccessMode_Mode{}
	for v, name := range csi.VolumeCapability_AccessMode_Mode_name {
		if v != 0 {
			out[strings.ToLower(strings.ReplaceAll(name, "_", "-"))] = csi.VolumeCapability_AccessMode_Mode(v)
		}
	}
	return out
}

// capFlags builds one volume capability.
type capFlags struct {
	fsType, accessMode string
	block              bool
}

func (f *capFlags) add(fs *pflag.FlagSet) {
	modes := slices.Sorted(maps.Keys(accessModes()))
	fs.StringVar(&f.fsType, "fs-type", "", "file system type of a mount volume")
	fs.StringVar(&f.accessMode, "access-mode", "single-node-writer", "one of "+strings.Join(modes, ", "))
	fs.BoolVar(&f.block, "block", false, "a raw block volume instead of a mount")
}

func (f *capFlags) capability() (*csi.VolumeCapability, error) {
	mode, ok := accessModes()[f.accessMode]
	if !ok {
		return nil, usagef("--access-mode %q is not a CSI access mode", f.accessMode)
	}
	vc := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
	if f.block {
		if f.fsType != "" {
			return nil, usagef("--fs-type does not apply to --block")
		}
		vc.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	} else {
		vc.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: f.fsType}}
	}
	return vc, nil
}
