package main

import (
	"debug/elf"
	"debug/gosym"
	"fmt"
	"strings"
)

// layoutSymbol is a function every server of the paths runs on every call:
// gRPC's server transport reading a request's headers.
const layoutSymbol = "google.golang.org/grpc/internal/transport.(*http2Server).operateHeaders"

// checkLayouts verifies that no two of bins (name and path of each
// binary) place layoutSymbol at the same address, and returns a line
// describing the layouts. At concurrency 1 the processes take turns on the
// same cores, and the CPU's branch predictors, indexed by virtual address
// and not flushed between processes, carry what one process taught them to
// another that runs the same code at the same addresses, which makes that
// process look cheaper than it is (docs/performance.md).
//
// The binaries in also (an A/B's compare build, which may well share the
// proxy's layout) are described, not checked. A binary that is not Go or
// has no such function cannot be checked and is named in the line.
func checkLayouts(bins, also [][2]string) (string, error) {
	seen := map[uint64]string{}
	var parts, unchecked []string
	for i, nb := range append(bins, also...) {
		name, path := nb[0], nb[1]
		addr, err := symbolAddress(path, layoutSymbol)
		if err != nil {
			unchecked = append(unchecked, fmt.Sprintf("%s (%v)", name, err))
			continue
		}
		if other, ok := seen[addr]; ok && i >= len(bins) {
			parts = append(parts, fmt.Sprintf("%s %#x (as %s)", name, addr, other))
			continue
		} else if ok {
			return "", fmt.Errorf("%s and %s run gRPC's server transport at the same address %#x: "+
				"their code layouts are the same, so at concurrency 1 one would find the branch predictors "+
				"trained by the other (docs/performance.md, \"One code layout per server\"); "+
				"build them from packages that differ", other, name, addr)
		}
		seen[addr] = name
		parts = append(parts, fmt.Sprintf("%s %#x", name, addr))
	}
	line := "code layouts: " + strings.Join(parts, ", ")
	if len(unchecked) > 0 {
		line += "; not checked: " + strings.Join(unchecked, ", ")
	}
	return line, nil
}

// symbolAddress is the entry address of the function name in the Go ELF
// binary at path, from its function table (.gopclntab), which binaries
// stripped of their symbol table (go run, go test) keep.
func symbolAddress(path, name string) (uint64, error) {
	f, err := elf.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	pcln, text := f.Section(".gopclntab"), f.Section(".text")
	if pcln == nil || text == nil {
		return 0, fmt.Errorf("not a Go binary")
	}
	data, err := pcln.Data()
	if err != nil {
		return 0, err
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr))
	if err != nil {
		return 0, err
	}
	fn := tab.LookupFunc(name)
	if fn == nil {
		return 0, fmt.Errorf("no function %s", name)
	}
	return fn.Entry, nil
}
