package pool

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// gcGen counts garbage collections, as seen by a sentinel object whose
// cleanup re-arms itself. Per-P caches compare it with the generation they
// were filled in and hand their contents to sync.Pool (which frees them
// after two more cycles) when it moves on, so memory a program stops using
// ages out as sync.Pool's victim cache does.
var (
	gcGen     atomic.Uint32
	gcArmOnce sync.Once
)

type gcSentinel struct {
	_ *int // a pointer keeps the sentinel out of the tiny allocator
	_ [8]byte
}

func armGC() {
	runtime.AddCleanup(new(gcSentinel), func(struct{}) {
		gcGen.Add(1)
		armGC()
	}, struct{}{})
}

func startGCGen() { gcArmOnce.Do(armGC) }
