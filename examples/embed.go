// Package examples embeds the example configuration so that the binary can
// serve it as its built-in default (`proxy-topology serve` without --config).
package examples

import "embed"

// Files holds proxy.yaml and connections/*.yaml.
//
//go:embed proxy.yaml connections/*.yaml
var Files embed.FS
