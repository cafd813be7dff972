package pool

import (
	"errors"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/zeroio/zeroio/internal/percpu"
)

// Stats is a snapshot of a pool's counters. Counters are kept per P (no
// shared hot cache line), so reading them costs one pass over GOMAXPROCS
// slots and may lag the operations in flight on other goroutines.
type Stats struct {
	// Hits counts buffers handed out from memory the pool already held.
	Hits uint64
	// Misses counts buffers handed out from a new heap allocation: the
	// pool was empty, the request was larger than the pool keeps, or (for
	// Slab) every slot was taken.
	Misses uint64
	// Outstanding is the number of buffers handed out and not yet
	// returned. It can go below zero when a pool adopts buffers it did not
	// hand out (see each pool's misuse contract).
	Outstanding int64
	// BytesHeld is the memory the pool keeps alive: its buffers, slots or
	// shards, whether idle or handed out, excluding heap fallbacks that the
	// pool does not keep.
	BytesHeld int64
	// Rejected counts returns refused as misuse: double Put or Done,
	// foreign or resliced buffers, stale handles.
	Rejected uint64
	// Dropped counts well-formed returns the pool let the garbage collector
	// take instead of keeping: buffers above the maximum size, heap
	// fallbacks.
	Dropped uint64
}

// Errors returned for misuse. They are returned (and counted in
// Stats.Rejected) instead of corrupting the pool: a rejected buffer is never
// handed to a second owner.
var (
	// ErrDoublePut reports a buffer returned while the pool already holds it.
	ErrDoublePut = errors.New("pool: buffer returned twice")
	// ErrForeign reports a buffer that is not one the pool hands out: from
	// another pool, resliced from the middle, or of the wrong capacity.
	ErrForeign = errors.New("pool: buffer does not belong to this pool")
	// ErrExhausted reports that a bounded pool has no free slot.
	ErrExhausted = errors.New("pool: all slots are in use")
)

// counts is the per-P block of counters every pool keeps.
type counts struct {
	// The zero-length atomic field aligns counts, and whatever holds it,
	// to 8 bytes on 32-bit platforms, where the atomic loads of Stats
	// need it.
	_                                     [0]atomic.Uint64
	hits, misses, puts, rejected, dropped uint64 // gets = hits + misses
}

func (c *counts) addTo(s *Stats) {
	s.Hits += percpu.Load(&c.hits)
	s.Misses += percpu.Load(&c.misses)
	s.Outstanding += int64(percpu.Load(&c.hits)+percpu.Load(&c.misses)) - int64(percpu.Load(&c.puts))
	s.Rejected += percpu.Load(&c.rejected)
	s.Dropped += percpu.Load(&c.dropped)
}

// perP holds one T per P, each on its own cache lines, and a spill slot
// guarded by a mutex for Ps beyond those that existed when it was made
// (GOMAXPROCS can grow at run time).
type perP[T any] struct {
	all     []T
	spillMu sync.Mutex
	spill   T
}

func (p *perP[T]) init() { p.all = make([]T, percpu.Procs()) }

// pin returns the calling P's T, exclusively, until unpin.
func (p *perP[T]) pin() *T {
	id := percpu.Pin()
	if id < len(p.all) {
		l := &p.all[id]
		percpu.Acquire(unsafe.Pointer(l))
		return l
	}
	percpu.Unpin()
	p.spillMu.Lock()
	return &p.spill
}

func (p *perP[T]) unpin(l *T) {
	if l == &p.spill {
		p.spillMu.Unlock()
		return
	}
	percpu.Release(unsafe.Pointer(l))
	percpu.Unpin()
}

// each calls f for every T; f may only read counters (with percpu.Load).
func (p *perP[T]) each(f func(*T)) {
	for i := range p.all {
		f(&p.all[i])
	}
	p.spillMu.Lock()
	f(&p.spill)
	p.spillMu.Unlock()
}

// count adds one to the counter sel picks in the calling P's block.
func count[T any](p *perP[T], sel func(*T) *uint64) {
	l := p.pin()
	percpu.Inc(sel(l))
	p.unpin(l)
}
