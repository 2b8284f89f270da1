package upstream

import (
	"context"
	"sync"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"

	"github.com/democratic-csi/proxy-topology/pkg/hostpath"
)

// Client is one upstream CSI driver.
type Client struct {
	// Target names the upstream in messages: the endpoint, or
	// "local-hostpath:<base path>" for the built-in driver.
	Target string

	Identity   csi.IdentityClient
	Controller csi.ControllerClient
	Node       csi.NodeClient

	conn   *grpc.ClientConn
	server *grpc.Server // in-process built-in driver, if any
	lis    *bufconn.Listener
	local  *hostpath.Options // the built-in driver's settings

	// mu guards the capability cache: nil until discovered.
	mu             sync.Mutex
	controllerCaps map[csi.ControllerServiceCapability_RPC_Type]bool
	nodeCaps       map[csi.NodeServiceCapability_RPC_Type]bool
}

func newClient(target string, conn *grpc.ClientConn) *Client {
	return &Client{
		Target:     target,
		conn:       conn,
		Identity:   csi.NewIdentityClient(conn),
		Controller: csi.NewControllerClient(conn),
		Node:       csi.NewNodeClient(conn),
	}
}

// HasController reports whether the upstream advertises a controller
// capability. Capabilities are discovered on first use and cached with the
// client; a failed discovery is not cached, so a restarted upstream is
// asked again. A cache hit makes no call, so ctx is only used on a miss.
func (c *Client) HasController(ctx context.Context, capability csi.ControllerServiceCapability_RPC_Type) (bool, error) {
	caps, err := discover(&c.mu, &c.controllerCaps, func() ([]csi.ControllerServiceCapability_RPC_Type, error) {
		resp, err := c.Controller.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
		if err != nil {
			return nil, err
		}
		var out []csi.ControllerServiceCapability_RPC_Type
		for _, x := range resp.GetCapabilities() {
			out = append(out, x.GetRpc().GetType())
		}
		return out, nil
	})
	return caps[capability], err
}

// HasNode is HasController for node capabilities.
func (c *Client) HasNode(ctx context.Context, capability csi.NodeServiceCapability_RPC_Type) (bool, error) {
	caps, err := discover(&c.mu, &c.nodeCaps, func() ([]csi.NodeServiceCapability_RPC_Type, error) {
		resp, err := c.Node.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
		if err != nil {
			return nil, err
		}
		var out []csi.NodeServiceCapability_RPC_Type
		for _, x := range resp.GetCapabilities() {
			out = append(out, x.GetRpc().GetType())
		}
		return out, nil
	})
	return caps[capability], err
}

// discover returns the capability set cached in *cache, asking the upstream
// with ask on a miss. Two callers missing at once both ask; the answers are
// the same, and neither waits for the other's call.
func discover[T comparable](mu *sync.Mutex, cache *map[T]bool, ask func() ([]T, error)) (map[T]bool, error) {
	mu.Lock()
	caps := *cache
	mu.Unlock()
	if caps != nil {
		return caps, nil
	}
	types, err := ask()
	if err != nil {
		return nil, err
	}
	caps = make(map[T]bool, len(types))
	for _, t := range types {
		caps[t] = true
	}
	mu.Lock()
	*cache = caps
	mu.Unlock()
	return caps, nil
}
