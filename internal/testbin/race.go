//go:build race

package testbin

// Race is true when the tests themselves run with -race.
const Race = true
