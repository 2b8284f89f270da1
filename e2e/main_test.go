package e2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/democratic-csi/proxy-topology/internal/testbin"
)

// binary is the proxy-topology executable every test starts.
var binary string

// raceEnabled: the suite runs with -race, and so does the binary.
var raceEnabled = testbin.Race

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	bin, cleanup, err := testbin.Build("..", testbin.Race)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer cleanup()
	binary = bin
	return m.Run()
}
