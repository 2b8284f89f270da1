package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/status"

	"github.com/democratic-csi/proxy-topology/pkg/backend"
	"github.com/democratic-csi/proxy-topology/pkg/capability"
	"github.com/democratic-csi/proxy-topology/pkg/config"
	"github.com/democratic-csi/proxy-topology/pkg/connection"
	pcsi "github.com/democratic-csi/proxy-topology/pkg/csi"
	"github.com/democratic-csi/proxy-topology/pkg/ids"
	"github.com/democratic-csi/proxy-topology/pkg/upstream"
)

// upstreamProbe is what check learns by asking the connections' upstreams
// (SPEC §6): what proxy.capabilities would advertise, and which
// connections route back to the proxy (the same backend.SelfGuard serve
// uses). A built-in local-hostpath connection is asked through a
// throwaway driver with the connection's settings on an empty temporary
// base path, so check never touches the real one.
type upstreamProbe struct {
	// refused maps a connection file to why it routes back to the proxy.
	refused map[string]string
	// line is the capabilities summary.
	line string
}

// probeUpstreams asks every valid connection file of folder, each within
// timeout (check --upstream-timeout).
func probeUpstreams(folder string, cfg *config.Loaded, ownEndpoint string, timeout time.Duration) upstreamProbe {
	out := upstreamProbe{refused: map[string]string{}}
	policy, err := capability.NewPolicy(cfg.Proxy.Capabilities, cfg.Proxy.ControllerPublish)
	if err != nil {
		out.line = "advertised capabilities: " + err.Error()
		return out
	}
	if !policy.Auto() {
		out.line = "advertised capabilities (explicit): " + capsLine(policy.Aggregate(nil))
		return out
	}
	des, err := os.ReadDir(folder)
	if err != nil {
		out.line = "advertised capabilities (auto): not computed: " + unwrapPath(err)
		return out
	}
	log := slog.New(slog.DiscardHandler)
	pool := upstream.NewPool(log)
	defer pool.Close()
	// The proxy's own marker, if it is serving on ownEndpoint: an
	// upstream that routes back to it names it.
	guard := backend.NewSelfGuardAs(ownInstance(pool, ownEndpoint, timeout), ownEndpoint)
	reg := backend.New(backend.Options{Pool: pool, NodeID: "check", DriverName: "check", Log: log})
	var ups []capability.Upstream
	var unconfirmed []string
	asked := 0
	for _, de := range des {
		name, ok := strings.CutSuffix(de.Name(), ".yaml")
		if !ok || de.IsDir() || ids.ValidateConnectionName(name) != nil {
			continue
		}
		path := filepath.Join(folder, de.Name())
		data, err := config.ReadFile(path)
		if err != nil {
			continue
		}
		c, _, err := config.ParseConnection(path, data, cfg.Topology.Accessibility())
		if err != nil || (c.Driver != config.DriverCSI && c.Driver != config.DriverLocalHostpath) {
			continue // reported per file; a group has no upstream of its own
		}
		asked++
		caps, why, err := askConnection(reg, guard, name, path, c, timeout)
		switch {
		case why != "":
			out.refused[path] = why
		case err != nil:
			// The code only: the full error (resolver and dialer details)
			// is long and differs from machine to machine.
			unconfirmed = append(unconfirmed, fmt.Sprintf("%s (%s)", name, status.Code(errors.Unwrap(err))))
		default:
			ups = append(ups, caps)
		}
	}
	out.line = fmt.Sprintf("advertised capabilities (auto, from %d of %d connections): %s", len(ups), asked, capsLine(policy.Aggregate(ups)))
	if len(unconfirmed) > 0 {
		out.line += "; unconfirmed, so adding nothing: " + strings.Join(unconfirmed, ", ")
	}
	return out
}

// ownInstance is the instance marker of the proxy serving on endpoint, ""
// when none answers.
func ownInstance(pool *upstream.Pool, endpoint string, timeout time.Duration) string {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	l, err := pool.CSI(ctx, "(own)", endpoint)
	if err != nil {
		return ""
	}
	defer l.Release()
	resp, err := l.Client().Identity.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil {
		return ""
	}
	return resp.GetManifest()[backend.ManifestInstance]
}

// askConnection asks one connection's upstream, with clients the registry
// builds; why is set when it routes back to the proxy. A built-in
// local-hostpath connection gets a driver with its settings on an empty
// temporary base path.
func askConnection(reg *backend.Registry, guard *backend.SelfGuard, name, path string, c *config.Connection, timeout time.Duration) (caps capability.Upstream, why string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if c.Driver == config.DriverLocalHostpath {
		dir, err := os.MkdirTemp("", "pt-check-")
		if err != nil {
			return caps, "", err
		}
		defer os.RemoveAll(dir)
		local := *c
		local.LocalHostpath.ShareBasePath = dir
		c = &local
	}
	conn, err := reg.Build(ctx, &connection.Connection{Name: name, File: path, Config: c})
	if err != nil {
		// Reported by its code, as the server answers a call.
		return caps, "", fmt.Errorf("clients: %w", pcsi.ConnectionError(err))
	}
	defer conn.Close()
	if c.Driver == config.DriverCSI {
		if err := guard.Check(ctx, conn); err != nil {
			return caps, err.Error(), nil
		}
	}
	caps, err = capability.Ask(ctx, conn.Controller, conn.Node)
	return caps, "", err
}

// capsLine renders advertised capabilities on one line.
func capsLine(c capability.Set) string {
	names := func(n int, get func(int) string) string {
		if n == 0 {
			return "none"
		}
		parts := make([]string, n)
		for i := range parts {
			parts[i] = get(i)
		}
		return strings.Join(parts, ", ")
	}
	exp := "none"
	if c.Expansion != csi.PluginCapability_VolumeExpansion_UNKNOWN {
		exp = c.Expansion.String()
	}
	svc := "no"
	if c.ControllerService {
		svc = "yes"
	}
	return fmt.Sprintf("controller service: %s; controller: %s; node: %s; volume expansion: %s", svc,
		names(len(c.Controller), func(i int) string { return c.Controller[i].String() }),
		names(len(c.Node), func(i int) string { return c.Node[i].String() }), exp)
}
