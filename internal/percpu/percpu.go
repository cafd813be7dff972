package percpu

import (
	"runtime"
	"unsafe" // also for go:linkname
)

// runtime_procPin is sync.runtime_procPin: it disables preemption and
// returns the id of the current P. The runtime keeps this symbol reachable
// by linkname for packages outside the standard library (see the comment on
// sync_runtime_procPin in runtime/proc.go and go.dev/issue/67401).
//
//go:linkname runtime_procPin sync.runtime_procPin
func runtime_procPin() int

//go:linkname runtime_procUnpin sync.runtime_procUnpin
func runtime_procUnpin()

// Pin disables preemption and returns the current P's id, in
// [0, GOMAXPROCS). Every Pin must be followed by Unpin on the same
// goroutine. A section that touches per-P data calls [Acquire] with the
// data's address after Pin and [Release] before Unpin.
func Pin() int { return runtime_procPin() }

// Unpin ends a section started by Pin.
func Unpin() { runtime_procUnpin() }

// Acquire tells the race detector that the pinned goroutine now owns the
// per-P data at p (the previous owner's writes happen before). It compiles
// to nothing without -race.
func Acquire(p unsafe.Pointer) { raceAcquire(p) }

// Release ends ownership taken by [Acquire].
func Release(p unsafe.Pointer) { raceRelease(p) }

// Procs returns the number of per-P slots a structure should allocate now:
// GOMAXPROCS, which may later grow; callers must bounds-check ids.
func Procs() int { return runtime.GOMAXPROCS(0) }

// CacheLine is the padding unit that keeps hot per-P state of different Ps
// on different cache lines (128 covers adjacent-line prefetch on x86 and
// the 128-byte lines of some arm64 cores).
const CacheLine = 128
