package main

import (
	"math"
	"sort"
)

// mannWhitneyP is the two-sided p-value of the Mann-Whitney U test that
// samples a and b come from one distribution, the test benchstat applies
// to two columns: exact when there are no ties and both samples are small,
// else the normal approximation with tie and continuity corrections. It
// returns NaN when either sample is empty.
func mannWhitneyP(a, b []float64) float64 {
	m, n := len(a), len(b)
	if m == 0 || n == 0 {
		return math.NaN()
	}
	type obs struct {
		v     float64
		fromA bool
	}
	all := make([]obs, 0, m+n)
	for _, v := range a {
		all = append(all, obs{v, true})
	}
	for _, v := range b {
		all = append(all, obs{v, false})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v < all[j].v })
	// Ranks, ties sharing their mean rank; tieSum is Σ(t³-t) over groups.
	var rankA, tieSum float64
	ties := false
	for i := 0; i < len(all); {
		j := i
		for j < len(all) && all[j].v == all[i].v {
			j++
		}
		if t := float64(j - i); t > 1 {
			ties = true
			tieSum += t*t*t - t
		}
		rank := float64(i+j+1) / 2 // mean of ranks i+1 … j
		for k := i; k < j; k++ {
			if all[k].fromA {
				rankA += rank
			}
		}
		i = j
	}
	u := rankA - float64(m*(m+1))/2 // pairs (x in a, y in b) with x > y, ties half
	if !ties && m <= 25 && n <= 25 {
		return exactU(m, n, u)
	}
	mu := float64(m*n) / 2
	nn := float64(m + n)
	sigma := math.Sqrt(float64(m*n) / 12 * (nn + 1 - tieSum/(nn*(nn-1))))
	if sigma == 0 {
		return 1 // every value equal
	}
	z := (math.Abs(u-mu) - 0.5) / sigma
	if z < 0 {
		z = 0
	}
	return math.Min(1, math.Erfc(z/math.Sqrt2))
}

// exactU is the two-sided p-value of U = u for samples of m and n without
// ties: twice the smaller tail of U's distribution over every ordering.
func exactU(m, n int, u float64) float64 {
	// f[j][k]: orderings of i values of a and j of b with U = k, built
	// up over i by where the largest value falls (in a it beats all j).
	f := make([][]float64, n+1)
	for j := range f {
		f[j] = make([]float64, m*n+1)
		f[j][0] = 1 // i = 0: U is 0
	}
	for i := 1; i <= m; i++ {
		g := make([][]float64, n+1)
		for j := range g {
			g[j] = make([]float64, m*n+1)
			for k := range g[j] {
				if k >= j {
					g[j][k] = f[j][k-j]
				}
				if j > 0 {
					g[j][k] += g[j-1][k]
				}
			}
		}
		f = g
	}
	var total, low, high float64
	for k, c := range f[n] {
		total += c
		if float64(k) <= u {
			low += c
		}
		if float64(k) >= u {
			high += c
		}
	}
	return math.Min(1, 2*math.Min(low, high)/total)
}
