// Command proxy-topology is a CSI driver that routes many StorageClasses to
// connections (external CSI drivers or the built-in local-hostpath) and adds
// topology. Subcommands: serve (default), topology, check, csi, version.
package main

import (
	"fmt"
	"os"
	"runtime/debug"
)

// version is stamped by the build (-ldflags "-X main.version=…"); without
// it the VCS revision Go records is used.
var version = ""

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return "dev-" + s.Value[:12]
			}
		}
	}
	return "dev"
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(args)
	case "topology":
		return topologyCmd(args, os.Stdout, os.Stderr)
	case "check":
		return checkCmd(args, os.Stdout, os.Stderr)
	case "csi":
		return csiCmd(args, os.Stdout, os.Stderr)
	case "version":
		fmt.Println(buildVersion())
		return 0
	case "help":
		usage()
		return 0
	default:
		fmt.Fprintf(os.Stderr, "proxy-topology: unknown command %q\n", cmd)
		usage()
		return 2
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage: proxy-topology [command] [flags]

commands:
  serve     serve the CSI driver (default); serve -h lists flags
  topology  dry-run node topology rules and CreateVolume accessibility
  check     validate the main config and every connection file
  csi       call the CSI socket: info, create-volume, list-volumes, … (csi -h)
  version   print the version
`)
}
