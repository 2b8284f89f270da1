// Package config loads and validates the main config and connection files.
// Everything is parsed and checked once, up front; the rest of the program
// receives plain structs, never a koanf instance.
//
// The files, by what they read:
//
//   - main.go: the main config (LoadMainFile, LoadMain) with its
//     PROXY_TOPOLOGY_SET_… env overrides, blamed on the variable when
//     wrong; unknown keys warn at the top level and fail under proxy:.
//   - connection.go: a connection file (ParseConnection): driver csi (an
//     external driver's endpoints, ValidateEndpoint) or local-hostpath
//     (the built-in driver), its parameters, secrets, node id template
//     and topology list (validated by pkg/accessible).
//   - group.go: a group file (driver: group, SPEC §11; IsGroupFile,
//     ParseGroup), which holds only group.members, the names of ordinary
//     connections; whether each member exists is checked where it is
//     used (pkg/connection), since members change on their own.
//   - file.go: any file of the connection folder, decoded once and parsed
//     as its driver key says (ParseFile: a group or a connection), and the
//     one-document rule both kinds share (noSecondDocument).
//   - decode.go: the one decoding path all three take (decodeNode): the
//     YAML nodes walked as the Go type, whose keys come from its koanf
//     tags; unknown keys, values of the wrong shape (with their line) and
//     fractions for whole numbers are found in that one walk.
//     yamlnode.go holds its helpers over yaml.v3 nodes.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/knadh/koanf/v2"
	"go.yaml.in/yaml/v3"

	"github.com/democratic-csi/proxy-topology/pkg/ids"
	"github.com/democratic-csi/proxy-topology/pkg/nodetopology"
)

// Drivers a main config or a connection can name.
const (
	DriverProxy         = "proxy"
	DriverCSI           = "csi"
	DriverLocalHostpath = "local-hostpath"
)

// DefaultCSIName is the driver name reported by GetPluginInfo.
const DefaultCSIName = "org.democratic-csi.proxy-topology"

// EnvPrefix starts env vars that override main-config keys:
// PROXY_TOPOLOGY_SET_PROXY__DEFAULTCONNECTION=x sets proxy.defaultConnection
// (double underscore separates path parts; matching is case-insensitive).
const EnvPrefix = "PROXY_TOPOLOGY_SET_"

// Main is the main config file (--config).
type Main struct {
	// Driver is what this process serves: "proxy" (default) routes to
	// connections; "local-hostpath" serves the built-in driver directly.
	Driver string `koanf:"driver"`
	// CSIName is the name reported by GetPluginInfo; empty means
	// DefaultCSIName. The --csi-name flag wins.
	CSIName string `koanf:"csiName"`
	// Proxy configures driver: proxy.
	Proxy Proxy `koanf:"proxy"`
	// LocalHostpath configures driver: local-hostpath.
	LocalHostpath LocalHostpath `koanf:"local-hostpath"`
}

// Proxy is the proxy section of the main config.
type Proxy struct {
	// ConfigFolder holds one <connection>.yaml per connection. Exactly one
	// of ConfigFolder and ConfigSecret is required.
	ConfigFolder string `koanf:"configFolder"`
	// ConfigSecret is "<namespace>/<name>" of a Secret whose keys
	// <connection>.yaml are the connection files, watched through the API
	// (needs get, list and watch on it) instead of read from a mounted
	// folder, so updates apply within seconds.
	ConfigSecret string `koanf:"configSecret"`
	// DefaultConnection serves requests without a connection parameter;
	// empty means such requests are refused.
	DefaultConnection string `koanf:"defaultConnection"`
	// CacheTimeoutMinutes: 0 re-reads the file on every call, -1 caches
	// forever, N drops a connection unused for N minutes. A changed file is
	// reloaded whatever the value. Unset means 60.
	CacheTimeoutMinutes int `koanf:"cacheTimeoutMinutes"`
	// NodeTopology computes the segments NodeGetInfo reports.
	NodeTopology nodetopology.Config `koanf:"nodeTopology"`
	// MaxVolumesPerNode is reported by NodeGetInfo; 0 means no limit.
	MaxVolumesPerNode int64 `koanf:"maxVolumesPerNode"`
	// NodeLocal says the deployment runs in node-local mode (SPEC §12):
	// every node plugin also serves the controller service, with an
	// external-provisioner in --node-deployment mode beside it. Node
	// plugins then always report <prefix>/node, the key that pins the
	// volumes of node-local connections (local-hostpath without topology)
	// to their node, and check stops warning about such connections.
	// False (the default): nodes report <prefix>/node only under type node
	// or when a node-local connection exists when they start.
	NodeLocal bool `koanf:"nodeLocal"`
	// ControllerPublish advertises PUBLISH_UNPUBLISH_VOLUME (and, under
	// capabilities auto, PUBLISH_READONLY when an upstream has it) and
	// forwards ControllerPublish/Unpublish. Off by default: most storage behind a
	// proxy needs no attach step, and the CO then skips VolumeAttachments.
	ControllerPublish bool `koanf:"controllerPublish"`
	// Capabilities is what the proxy advertises: "auto" (the default, also
	// when unset) or explicit lists (see Capabilities).
	Capabilities Capabilities `koanf:"capabilities"`
	// MaxIDLength refuses a volume or snapshot ID longer than this many
	// bytes (CreateVolume and CreateSnapshot delete the upstream object
	// and fail with INVALID_ARGUMENT). 0 (the default) sets no limit of
	// the proxy's own: longer IDs are returned, with a warning once per
	// connection and a metric. 128 is the CSI spec's limit.
	MaxIDLength int `koanf:"maxIdLength"`
}

// CapabilitiesAuto is the value of proxy.capabilities that advertises what
// the proxy implements intersected with what the connections' upstreams
// advertise.
const CapabilitiesAuto = "auto"

// Capabilities names advertised capabilities, e.g. CREATE_DELETE_SNAPSHOT.
// Each part left empty is computed as for "auto"; a part given replaces it.
type Capabilities struct {
	// Controller lists ControllerServiceCapability RPC types; empty: auto.
	Controller []string `koanf:"controller"`
	// Node lists NodeServiceCapability RPC types; empty: auto.
	Node []string `koanf:"node"`
	// VolumeExpansion is the plugin capability: online, offline or none;
	// empty: auto.
	VolumeExpansion string `koanf:"volumeExpansion"`
}

// VolumeExpansion values of proxy.capabilities.volumeExpansion.
const (
	ExpansionOnline  = "online"
	ExpansionOffline = "offline"
	ExpansionNone    = "none"
)

// LocalHostpath configures the built-in driver, in the main config
// (driver: local-hostpath) or in a connection file.
type LocalHostpath struct {
	// ShareBasePath holds one directory per volume. Required, absolute.
	ShareBasePath string `koanf:"shareBasePath" yaml:"shareBasePath"`
	// Stage makes the driver advertise STAGE_UNSTAGE_VOLUME and bind-mount
	// on NodeStage; publish then binds from the staging path.
	Stage bool `koanf:"stage" yaml:"stage"`
	// ControllerPublish makes the driver record attachments per node id.
	ControllerPublish bool `koanf:"controllerPublish" yaml:"controllerPublish"`
}

// Loaded is a validated main config plus what loading noticed.
type Loaded struct {
	Main
	// File is the path it came from ("" for embedded).
	File string
	// Warnings lists unknown keys and other non-fatal findings.
	Warnings []string
	// Topology is the compiled proxy.nodeTopology.
	Topology *nodetopology.Evaluator
}

// LoadMainFile reads (ReadFile) and validates a main config file.
func LoadMainFile(path string) (*Loaded, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return LoadMain(path, data, os.Environ())
}

// LoadMain parses data (YAML) as a main config named name, applies env
// overrides from environ, fills defaults and validates. Each problem is
// blamed on where its value came from: "config <name>: <key>: <reason>"
// for the file, "env <variable>: <key>: <reason>" for an override (the
// file may be fine; the variable is what to fix).
func LoadMain(name string, data []byte, environ []string) (*Loaded, error) {
	where := "config " + name
	doc, err := mainDocument(where, data)
	if err != nil {
		return nil, err
	}
	m := Main{Proxy: Proxy{CacheTimeoutMinutes: 60}}
	d := decodeNode(doc, &m, decodeRules{weak: true, leaves: true})
	// What koanf's YAML reading refused (a document that is no mapping)
	// is reported before anything else.
	if d.yamlErr != nil || slices.ContainsFunc(d.shape, func(e keyError) bool { return e.key == "" }) {
		return nil, fmt.Errorf("%s: %w", where, firstErrors(d.shapeErrors(nil), d.yamlErrors()))
	}
	k := koanf.New(".")
	fromEnv, err := applyEnv(k, environ)
	if err != nil {
		return nil, err
	}
	// An unknown key under proxy: is an error: a misspelt key there
	// silently changes what the proxy does (where volumes may go, what it
	// advertises). Elsewhere it is only warned about. What the file says
	// of a key an override sets is not used, and not checked.
	warnings, proxyErrs := d.unknownKeys(where)
	if err := firstErrors(proxyErrs, d.valueErrors(fromEnv), d.shapeErrors(fromEnv)); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	// koanf lays the overrides over what the file said.
	if err := k.UnmarshalWithConf("", &m, koanf.UnmarshalConf{Tag: "koanf"}); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if m.Driver == "" {
		m.Driver = DriverProxy
	}
	l := &Loaded{Main: m, File: name, Warnings: warnings}
	if err := l.validate(fromEnv); err != nil {
		return nil, err
	}
	return l, nil
}

// mainDocument parses the first YAML document of a main config (an empty
// file gives the zero node), as koanf's YAML parser reads it, and checks
// the depth of every document (checkDepth) before anything decodes it
// into keys.
func mainDocument(where string, data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var first yaml.Node
	if err := dec.Decode(&first); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if err := checkDepth(where, &first); err != nil {
		return nil, err
	}
	for {
		var doc yaml.Node
		if dec.Decode(&doc) != nil {
			return &first, nil // the end, or a document past the first that is not read
		}
		if err := checkDepth(where, &doc); err != nil {
			return nil, err
		}
	}
}

// validate checks the merged config. fromEnv maps the keys an env override
// set to the variable that set it: their problems name the variable, the
// others the file (l.File).
func (l *Loaded) validate(fromEnv map[string]string) error {
	var fileErrs, envErrs []error
	report := func(key string, err error) {
		if v, ok := fromEnv[key]; ok {
			envErrs = append(envErrs, fmt.Errorf("env %s: %w", v, err))
		} else {
			fileErrs = append(fileErrs, err)
		}
	}
	add := func(key, format string, a ...any) {
		report(key, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, a...)))
	}
	if l.CSIName != "" {
		if err := ValidateCSIName(l.CSIName); err != nil {
			add("csiName", "%v", err)
		}
	}
	switch l.Driver {
	case DriverProxy:
		switch p := l.Proxy; {
		case p.ConfigFolder == "" && p.ConfigSecret == "":
			add("proxy.configFolder", "required for driver: proxy")
		case p.ConfigFolder != "" && p.ConfigSecret != "":
			add("proxy.configSecret", "set together with proxy.configFolder; connections come from one of them")
		case p.ConfigSecret != "":
			if err := validateSecretRef(p.ConfigSecret); err != nil {
				add("proxy.configSecret", "%v", err)
			}
		}
		if d := l.Proxy.DefaultConnection; d != "" {
			if err := ids.ValidateConnectionName(d); err != nil {
				add("proxy.defaultConnection", "%v", err)
			}
		}
		if l.Proxy.CacheTimeoutMinutes < -1 {
			add("proxy.cacheTimeoutMinutes", "%d is invalid (0: no cache, -1: forever, N>0: minutes)", l.Proxy.CacheTimeoutMinutes)
		}
		if l.Proxy.MaxVolumesPerNode < 0 {
			add("proxy.maxVolumesPerNode", "%d is negative", l.Proxy.MaxVolumesPerNode)
		}
		if n := l.Proxy.MaxIDLength; n != 0 && n < ids.MinMaxLength {
			add("proxy.maxIdLength", "%d is too small (0: no limit of the proxy's own; otherwise at least %d, e.g. 128, the CSI limit)", n, ids.MinMaxLength)
		}
		switch e := l.Proxy.Capabilities.VolumeExpansion; e {
		case "", ExpansionOnline, ExpansionOffline, ExpansionNone:
		default:
			add("proxy.capabilities.volumeExpansion", "%q is not one of online, offline, none (or leave it out: auto)", e)
		}
		ev, err := nodetopology.Compile(l.Proxy.NodeTopology)
		if err != nil {
			// A joined list of *FieldError; the scalar ones (type,
			// prefix) can come from an override.
			errs := []error{err}
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				errs = j.Unwrap()
			}
			for _, e := range errs {
				var fe *nodetopology.FieldError
				if errors.As(e, &fe) {
					report(fe.Path, e)
				} else {
					report("", e)
				}
			}
		}
		l.Topology = ev
	case DriverLocalHostpath:
		if p := l.LocalHostpath.ShareBasePath; p == "" || !filepath.IsAbs(p) {
			add("local-hostpath.shareBasePath", "must be an absolute path, got %q", p)
		}
	case DriverCSI:
		add("driver", "csi is only valid in a connection file; the main config serves proxy or local-hostpath")
	default:
		add("driver", "%q is not one of proxy, local-hostpath", l.Driver)
	}
	var errs []error
	if len(fileErrs) > 0 {
		errs = append(errs, fmt.Errorf("config %s: %w", l.File, errors.Join(fileErrs...)))
	}
	return errors.Join(append(errs, envErrs...)...)
}

// validateSecretRef checks "<namespace>/<name>": a namespace is a DNS
// label, a Secret name a DNS subdomain.
func validateSecretRef(ref string) error {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || strings.Contains(name, "/") {
		return fmt.Errorf("%q: want <namespace>/<name>", ref)
	}
	if !isDNSLabel(ns) {
		return fmt.Errorf("%q: namespace %q is not a valid namespace name (lowercase alphanumerics and '-', at most 63)", ref, ns)
	}
	if len(name) > 253 || name == "" {
		return fmt.Errorf("%q: secret name %q must be 1 to 253 characters", ref, name)
	}
	for _, part := range strings.Split(name, ".") {
		if !isDNSLabel(part) {
			return fmt.Errorf("%q: secret name %q is not a valid DNS subdomain (lowercase alphanumerics, '-' and '.')", ref, name)
		}
	}
	return nil
}

// isDNSLabel reports whether s is an RFC 1123 label.
func isDNSLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// ValidateCSIName checks a CSI driver name: at most 63 characters, begins
// and ends with an alphanumeric, with dashes, dots and alphanumerics between
// (CSI spec, GetPluginInfoResponse.name).
func ValidateCSIName(n string) error {
	if n == "" || len(n) > 63 {
		return fmt.Errorf("%q must be 1 to 63 characters", n)
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if alnum || (c == '-' || c == '.') && i > 0 && i < len(n)-1 {
			continue
		}
		return fmt.Errorf("%q is not a valid CSI driver name (alphanumerics, '-' and '.', starting and ending with an alphanumeric)", n)
	}
	return nil
}

// applyEnv sets scalar keys from PROXY_TOPOLOGY_SET_* variables and
// returns which variable set each key. Its errors name the variable, not
// the file.
func applyEnv(k *koanf.Koanf, environ []string) (fromEnv map[string]string, err error) {
	kinds := map[string]reflect.Kind{}
	schemaOf(reflect.TypeOf(Main{})).scalars("", kinds)
	byEnv := make(map[string]string, len(kinds))
	for key := range kinds {
		byEnv[strings.ToUpper(strings.ReplaceAll(strings.ReplaceAll(key, ".", "__"), "-", "_"))] = key
	}
	fromEnv = map[string]string{}
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, EnvPrefix) {
			continue
		}
		key, ok := byEnv[strings.ToUpper(strings.TrimPrefix(name, EnvPrefix))]
		if !ok {
			return nil, fmt.Errorf("env %s does not name a scalar config key", name)
		}
		// Convert here, so a bad value is reported against the variable
		// that carried it rather than as if the file had said it.
		var v any = value
		switch kind := kinds[key]; {
		case isInt(kind):
			n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("env %s: %s: %q is not an integer", name, key, value)
			}
			v = n
		case kind == reflect.Bool:
			b, err := strconv.ParseBool(strings.TrimSpace(value))
			if err != nil {
				return nil, fmt.Errorf("env %s: %s: %q is not true or false", name, key, value)
			}
			v = b
		}
		if err := k.Set(key, v); err != nil {
			return nil, fmt.Errorf("env %s: %w", name, err)
		}
		fromEnv[key] = name
	}
	return fromEnv, nil
}
