package bench

import (
	"testing"

	"golang.org/x/sys/unix"
)

// Under taskset or a container's cpuset without CPU 0 the ping-pongs
// asked the kernel to pin them to CPU 0, which it refuses: nothing was
// pinned. They pin to the lowest CPU they may run on instead.
func TestAllowedCPU(t *testing.T) {
	var s unix.CPUSet
	s.Set(2)
	s.Set(3)
	if got := allowedCPU(s, 0); got != 2 {
		t.Errorf("cpuset 2-3: pinned to %d, want 2", got)
	}
	s.Set(0)
	if got := allowedCPU(s, 0); got != 0 {
		t.Errorf("cpuset 0,2-3: pinned to %d, want 0", got)
	}
}
