package report

import (
	"math"
	"slices"

	"golang.org/x/perf/benchmath"
)

// pValue is the p-value that samples a and b come from one distribution,
// as benchstat computes it when it compares two columns: benchmath's
// Mann-Whitney U-test, which assumes nothing of the distribution
// (benchmath.AssumeNothing, benchstat's default). It returns NaN when
// either sample is empty, and 1 when the test cannot tell anything (every
// value equal), as benchmath reports a failed test.
func pValue(a, b []float64) float64 {
	if len(a) == 0 || len(b) == 0 {
		return math.NaN()
	}
	th := benchmath.DefaultThresholds
	// NewSample sorts its values in place; a and b belong to the caller.
	s1 := benchmath.NewSample(slices.Clone(a), &th)
	s2 := benchmath.NewSample(slices.Clone(b), &th)
	return benchmath.AssumeNothing.Compare(s1, s2).P
}
