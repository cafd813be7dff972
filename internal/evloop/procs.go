package evloop

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// procs counts the Ps that the loops of every set of loops in the
// process hold (see Poller). The mutex orders the changes with their
// GOMAXPROCS calls; MayHold reads held without it.
var procs struct {
	sync.Mutex
	held atomic.Int64
}

// ReserveProcs returns how many loops a new set of loops runs, one per P
// the program had (GOMAXPROCS, less the Ps other sets' loops hold), and
// raises GOMAXPROCS by as many, so that the loops' Ps come on top of the
// program's. ReleaseProcs gives them back.
func ReserveProcs() int {
	procs.Lock()
	defer procs.Unlock()
	cur := runtime.GOMAXPROCS(0)
	n := max(cur-int(procs.held.Load()), 1)
	procs.held.Add(int64(n))
	runtime.GOMAXPROCS(cur + n)
	return n
}

// ReleaseProcs lowers GOMAXPROCS by the n Ps that stopped loops held, of
// those ReserveProcs counted.
func ReleaseProcs(n int) {
	if n == 0 {
		return
	}
	procs.Lock()
	defer procs.Unlock()
	procs.held.Add(int64(-n))
	runtime.GOMAXPROCS(max(runtime.GOMAXPROCS(0)-n, 1))
}
