// Command typedforwarder serves the typed forwarder (bench/typedproxy), the
// floor of ptbench's targets, as a process of its own:
//
//	typedforwarder -listen PATH -upstream TARGET [-pprof-address ADDR]
//
// ptbench builds and starts it; it is a binary of its own so that its code
// layout is its own (bench/serve).
package main

import (
	"os"

	"google.golang.org/grpc"

	"github.com/democratic-csi/proxy-topology/bench/serve"
	"github.com/democratic-csi/proxy-topology/bench/typedproxy"
)

func main() {
	os.Exit(serve.Forwarder("typedforwarder", os.Args[1:], func(up string) (*grpc.Server, *grpc.ClientConn, error) {
		return typedproxy.New(up)
	}))
}
