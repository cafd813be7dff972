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
