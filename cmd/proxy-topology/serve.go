package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/democratic-csi/proxy-topology/examples"
	"github.com/democratic-csi/proxy-topology/pkg/backend"
	"github.com/democratic-csi/proxy-topology/pkg/capability"
	"github.com/democratic-csi/proxy-topology/pkg/config"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
	"github.com/democratic-csi/proxy-topology/pkg/logging"
	"github.com/democratic-csi/proxy-topology/pkg/upstream"
)

// Options are the serve flags. Each flag's default comes from the env var
// named in its help, so a Pod spec can set either.
type Options struct {
	// Config is the main config file; empty serves the built-in default.
	Config string
	// DefaultDir is where the built-in default keeps its connections and
	// volumes.
	DefaultDir string
	// Endpoint is the CSI socket, unix:///path (or tcp://host:port).
	Endpoint string
	// NodeID is reported by NodeGetInfo and given to built-in drivers.
	NodeID string
	// Mode is all, controller or node.
	Mode string
	// LogFormat is text or json; LogLevel debug, info, warn or error.
	LogFormat, LogLevel string
	// CSIName overrides csiName from the main config.
	CSIName string
	// ShutdownTimeout bounds how long in-flight calls may take after
	// SIGTERM before they are cut.
	ShutdownTimeout time.Duration
	// MetricsAddress (host:port) serves /metrics, /healthz and /readyz;
	// empty serves none of them.
	MetricsAddress string
	// Kubeconfig is used for the Kubernetes API (nodeLabel rules,
	// proxy.configSecret); empty means the pod's ServiceAccount. The API
	// is not touched when neither is configured.
	Kubeconfig string

	// listening, if set, is called once the CSI socket serves, with the
	// bound metrics address ("" when off); tests wait on it.
	listening func(metricsAddr string)
}

func env(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

func defaultNodeID() string {
	if v := env("CSI_NODE_ID", "NODE_NAME"); v != "" {
		return v
	}
	h, _ := os.Hostname()
	return h
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// AddFlags registers the serve flags on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Config, "config", env("PROXY_TOPOLOGY_CONFIG"), "main config file (env PROXY_TOPOLOGY_CONFIG); empty serves the built-in example config with local-hostpath connections")
	fs.StringVar(&o.DefaultDir, "default-dir", or(env("PROXY_TOPOLOGY_DEFAULT_DIR"), filepath.Join(os.TempDir(), "proxy-topology-default")), "where the built-in default keeps connections and volumes (env PROXY_TOPOLOGY_DEFAULT_DIR)")
	fs.StringVar(&o.Endpoint, "csi-endpoint", or(env("CSI_ENDPOINT"), pcsi.DefaultEndpoint), "CSI socket (env CSI_ENDPOINT)")
	fs.StringVar(&o.NodeID, "node-id", defaultNodeID(), "node name (env CSI_NODE_ID, then NODE_NAME, then the hostname)")
	fs.StringVar(&o.Mode, "mode", or(env("PROXY_TOPOLOGY_MODE"), pcsi.ModeAll), "all, controller or node (env PROXY_TOPOLOGY_MODE)")
	fs.StringVar(&o.LogFormat, "log-format", or(env("PROXY_TOPOLOGY_LOG_FORMAT"), "text"), "text or json (env PROXY_TOPOLOGY_LOG_FORMAT)")
	fs.StringVar(&o.LogLevel, "log-level", or(env("PROXY_TOPOLOGY_LOG_LEVEL"), "info"), "debug, info, warn or error (env PROXY_TOPOLOGY_LOG_LEVEL)")
	fs.StringVar(&o.CSIName, "csi-name", env("PROXY_TOPOLOGY_CSI_NAME"), "driver name; overrides csiName in the config (env PROXY_TOPOLOGY_CSI_NAME)")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "how long in-flight calls may run after SIGTERM")
	fs.StringVar(&o.MetricsAddress, "metrics-address", env("PROXY_TOPOLOGY_METRICS_ADDRESS"), "host:port serving /metrics, /healthz and /readyz, e.g. :8080 (not 9808, the livenessprobe sidecar's port); empty: off (env PROXY_TOPOLOGY_METRICS_ADDRESS)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", env("KUBECONFIG"), "kubeconfig for nodeLabel rules and proxy.configSecret (env KUBECONFIG); empty: the pod's ServiceAccount")
}

// Validate checks the flags; errors name the flag.
func (o *Options) Validate() error {
	var errs []error
	if err := pcsi.CheckMode(o.Mode); err != nil {
		errs = append(errs, err)
	}
	if o.NodeID == "" && o.Mode != pcsi.ModeController {
		errs = append(errs, errors.New("--node-id is empty and no CSI_NODE_ID, NODE_NAME or hostname is available"))
	}
	if o.CSIName != "" {
		if err := config.ValidateCSIName(o.CSIName); err != nil {
			errs = append(errs, fmt.Errorf("--csi-name: %w", err))
		}
	}
	if o.ShutdownTimeout < 0 {
		errs = append(errs, fmt.Errorf("--shutdown-timeout %s is negative", o.ShutdownTimeout))
	}
	if o.MetricsAddress != "" {
		if _, _, err := net.SplitHostPort(o.MetricsAddress); err != nil {
			errs = append(errs, fmt.Errorf("--metrics-address %q: want host:port or :port", o.MetricsAddress))
		}
	}
	return errors.Join(errs...)
}

func newServeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the CSI driver (the default command)",
		Long: `Serves the CSI driver on --csi-endpoint until SIGTERM or SIGINT, then lets
in-flight calls finish for --shutdown-timeout.

--mode picks the services: controller (the Deployment, with the sidecars),
node (the DaemonSet) or all (one machine, or the DaemonSet of the
node-local mode, where every node is the controller of its own disk:
docs/kubernetes.md). Each flag's default comes from the env var its
help names, so a Pod spec can set either. Without --config it serves the
built-in example config, with local-hostpath connections under
--default-dir.

Exit codes: 0 stopped by a signal, 1 failed (the log says why), 2 a flag's
value is wrong.`,
		Example: `  proxy-topology serve --config /etc/proxy-topology/proxy.yaml --mode controller
  proxy-topology serve --config proxy.yaml --mode node --node-id "$NODE_NAME" --metrics-address :8080
  proxy-topology serve --csi-endpoint unix:///tmp/csi.sock --default-dir /tmp/pt   # the built-in example config`,
		Args: noArgs,
	}
	addServe(cmd)
	return cmd
}

// addServe makes cmd serve: the root command does too, so that the
// manifests' `proxy-topology --csi-endpoint …` keeps working.
func addServe(cmd *cobra.Command) {
	var o Options
	o.AddFlags(cmd.Flags())
	pprofAddress := addPprofFlag(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		log, err := logging.New(cmd.ErrOrStderr(), o.LogFormat, o.LogLevel)
		if err != nil {
			return usageError(err)
		}
		if err := o.Validate(); err != nil {
			return usageError(err)
		}
		routeKlog(log)
		if err := startPprof(*pprofAddress, log); err != nil {
			return usagef("--pprof-address: %w", err)
		}
		ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		if err := Serve(ctx, o, log); err != nil {
			log.Error("exiting", "error", err)
			return &exitError{code: exitFailed}
		}
		return nil
	}
}

// Serve loads the config, builds the driver and serves until ctx ends.
func Serve(ctx context.Context, o Options, log *slog.Logger) error {
	x, err := startOps(o, log)
	if err != nil {
		return err
	}
	defer x.stop()
	cfg, err := loadConfig(o, log)
	if err != nil {
		return err
	}
	x.setNotReady(notReadyStarting)
	for _, w := range cfg.Warnings {
		log.Warn(w)
	}
	name := or(o.CSIName, or(cfg.CSIName, config.DefaultCSIName))
	version := buildVersion()
	x.buildInfo(version, name, o.Mode)

	var svc pcsi.Service
	var driver *pcsi.Driver
	var pool *upstream.Pool
	// accepted tracks the CSI socket's client connections, closed when
	// auto capabilities grow (the proxy only).
	var accepted *capability.Tracker
	switch cfg.Driver {
	case config.DriverLocalHostpath:
		d, err := hostpath.New(hostpath.Options{
			DriverName: name, Version: version, NodeID: o.NodeID,
			BasePath:          cfg.LocalHostpath.ShareBasePath,
			Stage:             cfg.LocalHostpath.Stage,
			ControllerPublish: cfg.LocalHostpath.ControllerPublish,
			Logger:            log,
		})
		if err != nil {
			return fmt.Errorf("config %s: local-hostpath: %w", cfg.File, err)
		}
		svc = d
		log.Info("serving built-in local-hostpath", "base_path", cfg.LocalHostpath.ShareBasePath)
	default:
		pool = upstream.NewPool(log)
		defer pool.Close()
		x.watchPool(pool)
		accepted = &capability.Tracker{}
		driver, err = newProxy(ctx, o, cfg, name, version, pool, accepted, x, log)
		if err != nil {
			return err
		}
		svc = driver
	}
	srv := pcsi.NewServer(svc, log, x.observers()...)

	lis, err := pcsi.Listen(o.Endpoint)
	if err != nil {
		return err
	}
	if accepted != nil {
		lis = accepted.Listener(lis)
	}
	log.Info("serving CSI", "endpoint", o.Endpoint, "name", name, "version", version, "mode", o.Mode, "node_id", o.NodeID)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	if driver != nil {
		// The sidecars wait for Probe to report ready before they read
		// the capabilities, so Probe says not ready until every
		// connection's upstream was asked and answered, retried after 1s,
		// 2s, 4s… (pcsi.WatchCapabilities), or until startupGrace has
		// passed: an upstream that is down must not keep the proxy from
		// ever becoming ready (the livenessprobe sidecar would restart
		// it). What an upstream confirms later grows the set, and the
		// sidecars are restarted to read it (capability.Tracker).
		watched := make(chan struct{})
		wctx, cancel := context.WithCancel(ctx)
		go func() { defer close(watched); driver.WatchCapabilities(wctx, 0) }()
		defer func() { cancel(); <-watched }()
		grace := time.NewTimer(startupGrace)
		select {
		case <-driver.Confirmed():
		case <-grace.C:
			log.Warn("Probe reports ready before every connection's capabilities were confirmed (start-up grace over); what they add later restarts the sidecars",
				"grace", startupGrace)
		case <-ctx.Done():
		}
		grace.Stop()
		driver.SetReady(true)
	}
	x.setNotReady("")
	if o.listening != nil {
		o.listening(x.addr())
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: waiting for in-flight calls", "timeout", o.ShutdownTimeout)
	x.setNotReady(notReadyStopping)
	if driver != nil {
		driver.SetReady(false)
	}
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(o.ShutdownTimeout):
		log.Warn("in-flight calls did not finish in time; stopping")
		srv.Stop()
	}
	log.Info("stopped")
	return nil
}

func newProxy(ctx context.Context, o Options, cfg *config.Loaded, name, version string, pool *upstream.Pool, accepted *capability.Tracker, x *ops, log *slog.Logger) (*pcsi.Driver, error) {
	ev := cfg.Topology
	topo := ev.Accessibility()
	timeout := time.Duration(cfg.Proxy.CacheTimeoutMinutes) * time.Minute
	if cfg.Proxy.CacheTimeoutMinutes < 0 {
		timeout = -1
	}
	// A connection seen for the first time, or reloaded, or a change of
	// the connections Secret, may change what auto capabilities
	// advertise: the driver (made below) is told.
	var changed atomic.Pointer[pcsi.Driver]
	kick := func() {
		if d := changed.Load(); d != nil {
			d.ConnectionsChanged()
		}
	}
	var src connection.Source
	if ref := cfg.Proxy.ConfigSecret; ref != "" {
		ss, err := secretSource(ctx, o, ref, version, log, kick)
		if err != nil {
			return nil, fmt.Errorf("config %s: proxy.configSecret: %w", cfg.File, err)
		}
		src = ss
	}
	so := x.storeOptions(connection.Options{
		Folder: cfg.Proxy.ConfigFolder, Source: src, CacheTimeout: timeout, Topology: topo, Log: log,
	})
	so.OnLoad = onConnectionChange(so.OnLoad, kick)
	store := connection.NewStore(so)
	x.watchStore(store)
	// The registry builds every connection's clients, and refuses a
	// connection that routes back to this proxy when it does
	// (backend.SelfGuard).
	guard := backend.NewSelfGuard(o.Endpoint)
	registry := backend.New(backend.Options{
		Catalogue: store, Pool: pool, Guard: guard,
		NodeID: o.NodeID, DriverName: name, Version: version, Log: log,
	})
	policy, err := capability.NewPolicy(cfg.Proxy.Capabilities, cfg.Proxy.ControllerPublish)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", cfg.File, err)
	}
	opts := pcsi.Options{
		Policy:      &policy,
		Accepted:    accepted,
		MaxIDLength: cfg.Proxy.MaxIDLength,
		OnLongID:    x.longID,
		OnLostReply: x.lostReply,
		Name:        name, Version: version, NodeID: o.NodeID, Mode: o.Mode, Connections: registry,
		DefaultConnection: cfg.Proxy.DefaultConnection, Topology: topo,
		MaxVolumesPerNode: cfg.Proxy.MaxVolumesPerNode, Log: log,
		// A central controller warns about node-local connections; its
		// capability refresh finds them (no start-up read of every file).
		WarnCentralNodeLocal: o.Mode == pcsi.ModeController && !cfg.Proxy.NodeLocal,
	}
	if o.Mode != pcsi.ModeController {
		in, err := gatherNodeInputs(ctx, o, ev, version, log)
		if err != nil {
			return nil, fmt.Errorf("config %s: %w", cfg.File, err)
		}
		res := ev.Evaluate(in)
		reportNodeKey(&res, ev, cfg.Proxy.NodeLocal, o.NodeID, store, log)
		x.nodeTopology(res)
		res.Log(log)
		opts.NodeSegments, opts.NodeTopologyErr = res.Segments, res.Err()
		if opts.NodeTopologyErr != nil {
			log.Error("node reports no topology segment; NodeGetInfo will fail until the rules are fixed", "error", opts.NodeTopologyErr)
		} else {
			log.Info("node topology", "segments", formatSegments(res.Segments))
		}
	}
	if src != nil {
		if names, err := store.List(); err == nil {
			log.Info("connections", "source", store.Location(), "names", strings.Join(names, ","))
		}
	} else if _, err := os.Stat(cfg.Proxy.ConfigFolder); err != nil {
		log.Warn("connection folder is not readable yet; calls will fail until it is", "folder", cfg.Proxy.ConfigFolder, "error", err)
	} else if names, err := store.List(); err == nil {
		log.Info("connections", "folder", cfg.Proxy.ConfigFolder, "names", strings.Join(names, ","))
	}
	d, err := pcsi.New(opts)
	if err != nil {
		return nil, err
	}
	changed.Store(d)
	return d, nil
}

// startupGrace bounds how long Probe reports not ready at start-up while
// some upstream has not answered: long enough for an upstream started
// with the proxy to come up (retries at 1s, 3s, 7s), well within the
// liveness probe's patience (the manifests' 10s delay, then 3 failures
// 20s apart). A variable so that tests can shorten it.
var startupGrace = 10 * time.Second

// onConnectionChange chains onLoad (the metrics' hook, may be nil) with
// changed, called when a connection loads for the first time or reloads.
func onConnectionChange(onLoad func(string, bool, error), changed func()) func(string, bool, error) {
	var seen sync.Map
	return func(name string, reload bool, err error) {
		if onLoad != nil {
			onLoad(name, reload, err)
		}
		if _, known := seen.LoadOrStore(name, struct{}{}); !known || reload {
			changed()
		}
	}
}

func formatSegments(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

// loadConfig reads --config, or materialises the built-in default.
func loadConfig(o Options, log *slog.Logger) (*config.Loaded, error) {
	if o.Config != "" {
		return config.LoadMainFile(o.Config)
	}
	data, err := examplesProxyYAML()
	if err != nil {
		return nil, err
	}
	folder, err := materializeDefault(o.DefaultDir)
	if err != nil {
		return nil, fmt.Errorf("built-in default in %s: %w", o.DefaultDir, err)
	}
	environ := append(os.Environ(), config.EnvPrefix+"PROXY__CONFIGFOLDER="+folder)
	log.Info("no --config: serving the built-in example config", "connections", folder)
	return config.LoadMain("(built-in examples/proxy.yaml)", data, environ)
}

// materializeDefault writes the example local-hostpath connections into
// dir/connections with their volumes under dir/data/<name>, so the default
// runs without root and without external storage. Connections to external
// drivers are left out: they would point at sockets that do not exist here.
func materializeDefault(dir string) (string, error) {
	folder := filepath.Join(dir, "connections")
	if err := os.MkdirAll(folder, 0o750); err != nil {
		return "", err
	}
	entries, err := examples.Files.ReadDir("connections")
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		data, err := examples.Files.ReadFile("connections/" + e.Name())
		if err != nil {
			return "", err
		}
		name := strings.TrimSuffix(e.Name(), ".yaml")
		out, ok, err := withShareBasePath(data, filepath.Join(dir, "data", name))
		if err != nil {
			return "", fmt.Errorf("examples/connections/%s: %w", e.Name(), err)
		}
		if !ok {
			continue
		}
		if err := writeIfChanged(filepath.Join(folder, e.Name()), out); err != nil {
			return "", err
		}
	}
	return folder, nil
}

// withShareBasePath returns a local-hostpath connection file with its
// local-hostpath.shareBasePath set to path, edited as YAML data so its
// comments stay; ok is false for a file of another driver.
func withShareBasePath(data []byte, path string) (out []byte, ok bool, err error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, false, err
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, false, errors.New("not a YAML mapping")
	}
	root := doc.Content[0]
	if driver := mappingValue(root, "driver"); driver == nil || driver.Value != config.DriverLocalHostpath {
		return nil, false, nil
	}
	section := mappingValue(root, "local-hostpath")
	if section == nil {
		section = &yaml.Node{Kind: yaml.MappingNode}
		root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "local-hostpath"}, section)
	}
	if v := mappingValue(section, "shareBasePath"); v != nil {
		v.SetString(path)
	} else {
		section.Content = append(section.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "shareBasePath"}, &yaml.Node{Kind: yaml.ScalarNode, Value: path})
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, false, err
	}
	return buf.Bytes(), true, enc.Close()
}

// mappingValue returns the value node of key in a YAML mapping, or nil.
func mappingValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func writeIfChanged(path string, data []byte) error {
	if old, err := os.ReadFile(path); err == nil && string(old) == string(data) {
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o640); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func examplesProxyYAML() ([]byte, error) { return examples.Files.ReadFile("proxy.yaml") }
