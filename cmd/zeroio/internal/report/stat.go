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

// pairedPValue is the two-sided p-value of the paired t-test that the
// ratios a[i]/b[i], of samples taken in the same round, center on 1. The
// test is of their logarithms, so that a round the machine ran 20% slower
// scales both samples alike and cancels out; each round's samples are
// medians or percentiles of thousands of operations, whose log-ratios are
// close to normal. It returns NaN with fewer than two rounds or samples
// that are not positive and paired, 1 when every ratio is 1 and 0 when
// every ratio is the same other value.
func pairedPValue(a, b []float64) float64 {
	n := len(a)
	if n < 2 || n != len(b) {
		return math.NaN()
	}
	d := make([]float64, n)
	var mean float64
	for i := range a {
		if a[i] <= 0 || b[i] <= 0 {
			return math.NaN()
		}
		d[i] = math.Log(a[i] / b[i])
		mean += d[i] / float64(n)
	}
	var ss float64
	for _, x := range d {
		ss += (x - mean) * (x - mean)
	}
	se := math.Sqrt(ss / float64(n-1) / float64(n))
	switch {
	case se == 0 && mean == 0:
		return 1
	case se == 0:
		return 0
	}
	return studentTwoSided(math.Abs(mean/se), n-1)
}

// studentTwoSided returns P(|T| >= t) for Student's t distribution with df
// degrees of freedom, from the finite series for integer df in Abramowitz
// and Stegun 26.7.3 (odd df) and 26.7.4 (even df).
func studentTwoSided(t float64, df int) float64 {
	theta := math.Atan(t / math.Sqrt(float64(df)))
	sin, cos := math.Sincos(theta)
	c2 := cos * cos
	var within float64 // P(|T| < t)
	if df%2 == 1 {
		sum, term := 0.0, 1.0
		if df > 1 {
			sum = 1
			for k := 2; k <= df-3; k += 2 {
				term *= float64(k) / float64(k+1) * c2
				sum += term
			}
		}
		within = 2 / math.Pi * (theta + sin*cos*sum)
	} else {
		sum, term := 1.0, 1.0
		for k := 1; k <= df-3; k += 2 {
			term *= float64(k) / float64(k+1) * c2
			sum += term
		}
		within = sin * sum
	}
	return min(max(1-within, 0), 1)
}
