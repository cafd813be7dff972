package splice

import "testing"

// TestGaugesNeverWrap: ReadStats sums the gauges shard by shard while
// copies run, so it can see a pipe or buffer given back on one P whose
// taking, on a shard it had already read, it missed. That sum is one
// below the truth; below zero it must read 0, not wrap to 2^64-1 (which
// /metrics would export as a spike of 1.8e19 pipes in use).
func TestGaugesNeverWrap(t *testing.T) {
	if s := ReadStats(); s.PipesInUse != 0 || s.BuffersInUse != 0 {
		t.Skipf("copies in flight: %d pipes, %d buffers", s.PipesInUse, s.BuffersInUse)
	}
	// The give-backs without the takes, as such a read sees them.
	add(cPipesInUse, ^uint64(0))
	add(cBuffersInUse, ^uint64(0))
	defer func() {
		add(cPipesInUse, 1)
		add(cBuffersInUse, 1)
	}()
	if s := ReadStats(); s.PipesInUse != 0 || s.BuffersInUse != 0 {
		t.Fatalf("gauges read %d pipes, %d buffers in use; want 0", s.PipesInUse, s.BuffersInUse)
	}
}
