package percpu

import "sync/atomic"

// Load reads a counter written with [Inc] or [Add] by its owning P.
func Load(p *uint64) uint64 { return atomic.LoadUint64(p) }
