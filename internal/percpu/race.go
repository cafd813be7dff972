//go:build race

package percpu

import (
	"runtime"
	"sync/atomic"
	"unsafe"
)

// RaceEnabled reports whether the race detector is compiled in.
const RaceEnabled = true

func raceAcquire(p unsafe.Pointer) { runtime.RaceAcquire(p) }

func raceRelease(p unsafe.Pointer) { runtime.RaceRelease(p) }

// Inc adds one to a per-P counter. Under the race detector it is atomic so
// that concurrent readers ([Load]) are not reported.
func Inc(p *uint64) { atomic.AddUint64(p, 1) }

// Add adds d to a per-P counter.
func Add(p *uint64, d uint64) { atomic.AddUint64(p, d) }

// Set stores v in a per-P word that other goroutines read with [Load].
func Set(p *uint64, v uint64) { atomic.StoreUint64(p, v) }
