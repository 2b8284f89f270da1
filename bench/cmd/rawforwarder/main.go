// Command rawforwarder serves the raw forwarder (bench/rawproxy), which
// ptbench reports without a goal, as a process of its own:
//
//	rawforwarder -listen PATH -upstream TARGET [-pprof-address ADDR]
//
// ptbench builds and starts it; it is a binary of its own so that its code
// layout is its own (bench/serve).
package main

import (
	"os"

	"google.golang.org/grpc"

	"github.com/democratic-csi/proxy-topology/bench/rawproxy"
	"github.com/democratic-csi/proxy-topology/bench/serve"
)

func main() {
	os.Exit(serve.Forwarder("rawforwarder", os.Args[1:], func(up string) (*grpc.Server, *grpc.ClientConn, error) {
		return rawproxy.New(up)
	}))
}
