// Package pool provides byte-buffer pools that allocate nothing per Get and
// Put in steady state, bound the memory they keep, and refuse misuse
// instead of letting two owners share a buffer.
//
// # Which pool
//
//   - [Sized] (and the package-level [Get] and [Put]) is the default: any
//     size, in power-of-two classes from 64 B to 1 MiB (configurable).
//     Idle memory is released by the garbage collector within a few cycles.
//     docs/BENCHMARKS.md compares it with the sync.Pool-based pools with
//     size classes (mcache, bytebufferpool, go-buffer-pool) and a bare
//     sync.Pool of one size.
//   - [Slab] is bounded: a fixed number of fixed-size slots carved from one
//     allocation. It never holds more memory than that (and its bitmap),
//     detects double and foreign Puts exactly, and when all slots are
//     taken it falls back to the heap or reports [ErrExhausted], never
//     waits. With
//     [SlabOptions].PerPCache each P keeps its last returned slot, which
//     makes a Get/Put pair cheaper (no atomic read-modify-write on a hit)
//     and lets up to one free slot per P hide from Gets on other Ps.
//   - [Arena] carves many small, short-lived buffers out of large shards
//     with a bump pointer, for workloads that would otherwise make millions
//     of tiny allocations. Its handles ([Buf]) detect a release through a
//     copy.
//
// Each pool's doc comment states its misuse contract: what a double,
// foreign, resliced or late return does.
//
// # Statistics
//
// Every pool counts hits, misses (heap allocations), outstanding buffers,
// bytes held and rejected returns in a [Stats] snapshot ([Arena] only of
// the buffers it carves from shards: its plain allocations are make
// behind a size check). The counters live in
// per-P blocks updated without atomic read-modify-write instructions, so they
// cost about a nanosecond and stay on in production.
//
// # Platforms
//
// The pools are pure Go and behave the same on every platform. Their per-P
// caches use sync.runtime_procPin through go:linkname, a symbol the Go
// runtime keeps available to packages outside the standard library
// (go.dev/issue/67401).
package pool
