// Package percpu gives zeroio's hot paths per-P (per logical processor)
// state without atomic read-modify-write instructions.
//
// Between [Pin] and [Unpin] the calling goroutine cannot be preempted or
// moved to another P, so data indexed by the returned P id is touched by one
// goroutine at a time: the same guarantee sync.Pool builds its per-P caches
// on. Nothing may block, allocate heavily or call back into user code while
// pinned.
//
// Under the race detector, Pin and Unpin also tell the detector about the
// hand-over between goroutines that share a P, so plain accesses to per-P
// data are checked for real races rather than reported as false ones.
package percpu
