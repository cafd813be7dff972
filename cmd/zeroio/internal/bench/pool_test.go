package bench

import (
	"sync/atomic"
	"testing"
)

func BenchmarkPool(b *testing.B)         { runSuite(b, "Pool") }
func BenchmarkSeedBytePool(b *testing.B) { runSuite(b, "SeedBytePool") }
func BenchmarkVsMalloc(b *testing.B)     { runSuite(b, "VsMalloc") }
func BenchmarkChaos(b *testing.B)        { runSuite(b, "Chaos") }

// TestParallel: the parallel loop runs op exactly n times, whatever n is
// against the grain and the number of goroutines.
func TestParallel(t *testing.T) {
	for _, n := range []int{0, 1, 7, 199, 200_001, 3_000_017} {
		var ops atomic.Int64
		parallel(n, func() { ops.Add(1) })
		if got := ops.Load(); got != int64(n) {
			t.Errorf("parallel(%d) ran op %d times", n, got)
		}
	}
}
