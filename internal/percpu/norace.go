//go:build !race

package percpu

import "unsafe"

// RaceEnabled reports whether the race detector is compiled in.
const RaceEnabled = false

func raceAcquire(unsafe.Pointer) {}
func raceRelease(unsafe.Pointer) {}

// Inc adds one to a per-P counter. The caller holds the P pinned, so no
// other goroutine writes the counter; a plain increment is enough.
// Concurrent readers use [Load] and may see a value that lags by the
// increments in flight, never a torn one on 64-bit platforms.
func Inc(p *uint64) { *p++ }

// Add adds d to a per-P counter; see [Inc].
func Add(p *uint64, d uint64) { *p += d }

// Set stores v in a per-P word that other goroutines read with [Load]; see
// [Inc].
func Set(p *uint64, v uint64) { *p = v }
