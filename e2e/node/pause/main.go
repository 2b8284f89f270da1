// Command pause is the sandbox image's process for e2e-node's containerd
// (its CRI sandbox_image): it does nothing until it is told to stop. It
// is built static (CGO_ENABLED=0) into an image by `make node-images`, so
// the suite never pulls registry.k8s.io/pause.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
