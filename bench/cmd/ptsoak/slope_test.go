package main

import (
	"math"
	"testing"
)

func TestFloorSlope(t *testing.T) {
	const n = 400
	xs := make([]float64, n)
	saw, leak := make([]float64, n), make([]float64, n)
	for i := range xs {
		xs[i] = float64(i) / 50 // thousands of edits
		// A sawtooth whose peaks grow while its floor stays at 50 MiB:
		// what lazily returned pages look like.
		peak := 10 + xs[i]*3
		saw[i] = 50 + math.Mod(float64(i), 20)/20*peak
		// The same sawtooth on a floor that rises 1 MiB per 1,000 edits.
		leak[i] = saw[i] + xs[i]
	}
	if got := floorSlope(xs, saw, slopeWindows); math.Abs(got) > 0.05 {
		t.Errorf("floor slope of a sawtooth on a flat floor = %.3f, want about 0 (all samples: %.3f)", got, slope(xs, saw))
	}
	if got := floorSlope(xs, leak, slopeWindows); math.Abs(got-1) > 0.05 {
		t.Errorf("floor slope of a leak of 1 per 1,000 edits = %.3f, want about 1", got)
	}
	if got := slope(xs, saw); got < 0.5 {
		t.Errorf("slope of all samples = %.3f; the test's sawtooth should mislead it", got)
	}
}
