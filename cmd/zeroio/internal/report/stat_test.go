package report

import (
	"math"
	"testing"
)

func TestPValue(t *testing.T) {
	seq := func(from, to float64) []float64 {
		var s []float64
		for v := from; v <= to; v++ {
			s = append(s, v)
		}
		return s
	}
	for _, tc := range []struct {
		name string
		a, b []float64
		want float64
	}{
		// Exact: U = 0 for 3 and 3 is one ordering of C(6,3) = 20 at each
		// end.
		{"separated-3", seq(1, 3), seq(4, 6), 0.1},
		{"separated-3-reversed", seq(4, 6), seq(1, 3), 0.1},
		// U = 3 of 9: P(U <= 3) = (1+1+2+3)/20.
		{"interleaved-3", []float64{1, 3, 5}, []float64{2, 4, 6}, 0.7},
		// 6 and 6 fully separated: 2/C(12,6) = 2/924, benchstat's p=0.002.
		{"separated-6", seq(1, 6), seq(7, 12), 2.0 / 924},
		// All equal: no evidence of any difference.
		{"equal", []float64{5, 5, 5, 5}, []float64{5, 5, 5}, 1},
	} {
		if got := pValue(tc.a, tc.b); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: p = %v, want %v", tc.name, got, tc.want)
		}
	}
	// Ties take the normal approximation: a clear shift is significant, a
	// sample against itself is not.
	a := []float64{10, 10, 11, 11, 12, 12, 13, 13, 14, 14}
	b := []float64{20, 20, 21, 21, 22, 22, 23, 23, 24, 24}
	if p := pValue(a, b); p >= 0.001 {
		t.Errorf("tied, separated: p = %v, want < 0.001", p)
	}
	if p := pValue(a, a); p < 0.9 {
		t.Errorf("tied, same sample: p = %v, want about 1", p)
	}
	if p := pValue(nil, b); !math.IsNaN(p) {
		t.Errorf("empty sample: p = %v, want NaN", p)
	}
}

func TestStudentTwoSided(t *testing.T) {
	for _, tc := range []struct {
		t    float64
		df   int
		want float64
	}{
		// The two-sided 5% points of tables of Student's t.
		{12.706, 1, 0.05}, {4.303, 2, 0.05}, {3.182, 3, 0.05}, {2.776, 4, 0.05}, {2.571, 5, 0.05}, {2.228, 10, 0.05},
		// R: t.test(extra ~ group, data = sleep, paired = TRUE) gives
		// t = -4.0621, df = 9, p-value = 0.002833.
		{4.0621, 9, 0.002833},
		{0, 5, 1},
	} {
		if got := studentTwoSided(tc.t, tc.df); math.Abs(got-tc.want) > 5e-5 {
			t.Errorf("t = %v, df = %d: p = %.6f, want %.6f", tc.t, tc.df, got, tc.want)
		}
	}
}

func TestPairedPValue(t *testing.T) {
	// Rounds that run 40% apart: the U test of the two samples sees nothing.
	a := []float64{105, 147, 105, 147, 105, 147}
	b := []float64{100, 140, 100, 140, 100, 140}
	if p := pValue(a, b); p < 0.05 {
		t.Fatalf("U test p = %v, want the noise to hide 5%%", p)
	}
	// A steady 5% with a little scatter, round by round: log-ratios of
	// mean m and standard error se give t = m/se with 5 degrees of freedom.
	a = []float64{105, 147.5, 104.5, 147, 105.3, 146.8}
	d := make([]float64, len(a))
	var m float64
	for i := range a {
		d[i] = math.Log(a[i] / b[i])
		m += d[i] / 6
	}
	var ss float64
	for _, x := range d {
		ss += (x - m) * (x - m)
	}
	want := studentTwoSided(m/math.Sqrt(ss/5/6), 5)
	if p := pairedPValue(a, b); math.Abs(p-want) > 1e-12 || p >= 0.001 {
		t.Errorf("paired p = %v, want %v, well below 0.05", p, want)
	}
	if p := pairedPValue(b, a); math.Abs(p-want) > 1e-12 {
		t.Errorf("paired p reversed = %v, want %v", p, want)
	}
	if p := pairedPValue(b, b); p != 1 {
		t.Errorf("equal samples: p = %v, want 1", p)
	}
	for _, bad := range [][2][]float64{{{1}, {1}}, {{1, 2}, {1}}, {{1, 0}, {1, 2}}} {
		if p := pairedPValue(bad[0], bad[1]); !math.IsNaN(p) {
			t.Errorf("pairedPValue(%v, %v) = %v, want NaN", bad[0], bad[1], p)
		}
	}
}
