package pool

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"

	"github.com/zeroio/zeroio/internal/percpu"
)

// ArenaOptions configures an [Arena].
type ArenaOptions struct {
	// ShardSize is the size of the large buffers that Make carves up; 0
	// means 64 KiB. Requests above half a shard are plain allocations.
	ShardSize int
	// Retries is how many retired shards Make examines for room before it
	// allocates a new one, after the calling P's current shard is full; 0
	// allocates at once.
	Retries int
}

// ErrDoubleDone reports a [Buf] released twice: through a copy of a handle
// already released, or after its shard was recycled.
var ErrDoubleDone = errors.New("pool: arena buffer released twice")

// Arena sub-allocates many small, short-lived buffers by bumping a pointer
// through large shards, the design of jsign/bufpool: one allocation serves
// hundreds of requests, and a shard is reused from its start once every
// buffer carved from it has been released.
//
// Each P carves from its own current shard (no atomic instruction to bump
// the pointer). A full shard whose buffers are still out is retired to a
// queue, oldest first; when its P's shard is full, Make examines up to
// Retries retired shards for one that has emptied before it allocates a new
// one. Unlike bufpool's sync.Pool of shards, the queue survives garbage
// collections, so a fragmented workload settles on the shards it needs
// instead of reallocating them every cycle; a retired shard that finds no
// taker for two collections is dropped for the garbage collector, whether
// or not the arena is still used. With Retries 0 nothing is queued: a full
// shard is left to the garbage collector once its last buffer is released.
//
// Make returns a [Buf] by value and allocates nothing. Every allocation in a
// shard has a bit tagged with the shard's reuse epoch; Done clears it with a
// compare-and-swap, so releasing the same allocation twice, through copies
// of the handle or after the shard was recycled, is detected and refused
// ([ErrDoubleDone]) instead of letting a shard be reused under a live
// buffer.
//
// # Misuse contract
//
//   - Done twice through the same handle: the second call is a no-op.
//   - Done through a copy of a released handle, or through a handle whose
//     shard was since recycled: ErrDoubleDone, counted in Stats.Rejected,
//     nothing changes.
//   - Using B after Done: B is set to nil in the handle Done was called on;
//     copies still see the bytes, which may by then belong to another
//     buffer. Do not use a buffer after Done.
//   - A Buf never released keeps its whole shard from being reused, and
//     alive while B is reachable.
//   - Buffers that are plain allocations (Make(0), and requests above half
//     a shard) are not tracked: Done through a copy of such a released
//     handle returns nil and counts one more release (Stats.Outstanding
//     can drop below zero). No bytes are shared either way.
type Arena struct {
	shardSize int
	retries   int
	locals    perP[arenaLocal]
	spareMu   sync.Mutex
	spare     []*shard // FIFO ring of retired shards
	spareHead int
	spareLen  int
	watching  bool          // watchSpare is armed; under spareMu
	held      *atomic.Int64 // its own allocation: see heldRef
	heap      *shard        // marks a Buf whose B is a plain allocation
}

type arenaLocal struct {
	cur *shard
	counts
	_ [percpu.CacheLine - (8+5*8)%percpu.CacheLine]byte
}

// granule is the alignment of every allocation in a shard, and the unit
// of its allocation bitmap.
const granule = 8

type shard struct {
	shardState
	// Padding to 256 bytes, a size class whose objects start on cache
	// line boundaries: the owner writes off on every Make, and two Ps'
	// shards sharing a line would make each other's Make miss the cache.
	_ [256 - unsafe.Sizeof(shardState{})]byte
}

type shardState struct {
	mem     []byte
	off     int    // bump pointer; touched only by the shard's owner
	epoch   uint32 // reuse count; touched only by the owner
	retired uint32 // GC generation when last retired; under spareMu
	// used lists, in order, the bitmap words that carve set a bit in this
	// epoch, and the ones before used[live] have been seen empty since
	// (they stay empty: carving only moves forward). Touched only by the
	// owner. Checking these words, rather than keeping a count of the
	// buffers still out, spares every Done a shared atomic add; it costs
	// at most one load per buffer carved.
	used  []uint32
	nused int
	live  int
	arena *Arena
	// words hold one bit per granule where an allocation starts (low 32
	// bits) and the epoch those bits belong to (high 32 bits), so that a
	// CAS checks both at once.
	words []atomic.Uint64
}

// Buf is a buffer carved from an [Arena]. Handles are values: copying one
// copies the right to release it once.
type Buf struct {
	// B has length and capacity n, as asked of Make.
	B     []byte
	s     *shard
	off   uint32
	epoch uint32
}

// NewArena returns an Arena.
func NewArena(o ArenaOptions) (*Arena, error) {
	if o.ShardSize < 0 || o.Retries < 0 {
		return nil, fmt.Errorf("pool: arena needs ShardSize >= 0 and Retries >= 0, got %d and %d", o.ShardSize, o.Retries)
	}
	if o.ShardSize == 0 {
		o.ShardSize = 64 << 10
	}
	if o.ShardSize > 1<<30 {
		return nil, fmt.Errorf("pool: arena ShardSize %d above the 1 GiB limit", o.ShardSize)
	}
	a := &Arena{shardSize: o.ShardSize, retries: o.Retries, held: new(atomic.Int64)}
	a.heap = &shard{shardState: shardState{arena: a}}
	a.locals.init()
	return a, nil
}

func (a *Arena) newShard() *shard {
	// One allocation holds the bitmap words, the used list and the bytes.
	nw := (a.shardSize + 32*granule - 1) / (32 * granule)
	nl := (nw + 1) / 2 // 8-byte units of the used list
	block := make([]atomic.Uint64, nw+nl+(a.shardSize+7)/8)
	s := &shard{shardState: shardState{
		mem:   unsafe.Slice((*byte)(unsafe.Pointer(&block[nw+nl])), a.shardSize),
		used:  unsafe.Slice((*uint32)(unsafe.Pointer(&block[nw])), nw),
		arena: a,
		words: block[:nw:nw],
	}}
	a.held.Add(int64(a.shardSize))
	runtime.AddCleanup(s, func(r heldRef) { r.held.Add(-r.n) }, heldRef{a.held, int64(a.shardSize)})
	return s
}

// fits reports whether an owned shard can serve sz bytes, recycling it
// from the start when every allocation in it has been released.
func (s *shard) fits(sz int) bool {
	if s.off+sz <= len(s.mem) {
		return true
	}
	// A buffer is live while its bit is set.
	for ; s.live < s.nused; s.live++ {
		if uint32(s.words[s.used[s.live]].Load()) != 0 {
			return false
		}
	}
	// Nothing of this epoch is live: start over. Done calls for the old
	// epoch now fail their CAS on the epoch half of the word. A shard whose
	// epoch would wrap is not recycled (it ages out of the spare queue), so
	// a handle from 2^32 reuses ago can never match again.
	if s.epoch == math.MaxUint32 {
		return false
	}
	s.epoch++
	s.off = 0
	s.nused = 0
	s.live = 0
	return sz <= len(s.mem)
}

// carve allocates n bytes (sz after rounding) from an owned shard that fits.
func (s *shard) carve(n, sz int) Buf {
	off := s.off
	s.off += sz
	g := off / granule
	if wi := uint32(g / 32); s.nused == 0 || s.used[s.nused-1] != wi {
		s.used[s.nused] = wi
		s.nused++
	}
	w := &s.words[g/32]
	bit := uint64(1) << (g % 32)
	ep := uint64(s.epoch) << 32
	for {
		old := w.Load()
		nw := old
		if old&^(1<<32-1) != ep {
			nw = ep // first allocation of this epoch in this word
		}
		if w.CompareAndSwap(old, nw|bit) {
			break
		}
	}
	return Buf{B: s.mem[off : off+n : off+n], s: s, off: uint32(off), epoch: s.epoch}
}

// Make returns a buffer of length and capacity n. Requests for more than
// half a shard, and for 0 bytes, are plain allocations. Make panics if n is
// negative, as make does.
func (a *Arena) Make(n int) Buf {
	if n <= 0 || n > a.shardSize/2 {
		return a.makeHeap(n)
	}
	sz := (n + granule - 1) &^ (granule - 1)
	id := percpu.Pin()
	if id < len(a.locals.all) {
		l := &a.locals.all[id]
		percpu.Acquire(unsafe.Pointer(l))
		if s := l.cur; s != nil && s.fits(sz) {
			b := s.carve(n, sz)
			percpu.Inc(&l.hits)
			percpu.Release(unsafe.Pointer(l))
			percpu.Unpin()
			return b
		}
		old := l.cur
		l.cur = nil
		percpu.Release(unsafe.Pointer(l))
		percpu.Unpin()
		return a.makeSlow(old, n, sz)
	}
	percpu.Unpin()
	return a.makeSpill(n, sz)
}

// makeSpill is Make on a P added since the arena was made (GOMAXPROCS
// grew): the spill slot's shard, under its mutex, serves all such Ps.
func (a *Arena) makeSpill(n, sz int) Buf {
	a.locals.spillMu.Lock()
	l := &a.locals.spill
	if s := l.cur; s != nil && s.fits(sz) {
		b := s.carve(n, sz)
		percpu.Inc(&l.hits)
		a.locals.spillMu.Unlock()
		return b
	}
	old := l.cur
	l.cur = nil
	a.locals.spillMu.Unlock()
	return a.makeSlow(old, n, sz)
}

func (a *Arena) makeHeap(n int) Buf {
	if n < 0 {
		panic("pool: Arena.Make with negative size")
	}
	count(&a.locals, func(l *arenaLocal) *uint64 { return &l.misses })
	return Buf{B: make([]byte, n), s: a.heap}
}

// makeSlow retires the full shard old and finds or makes another.
func (a *Arena) makeSlow(old *shard, n, sz int) Buf {
	s := a.reuse(old, sz)
	hit := s != nil
	if !hit {
		s = a.newShard()
	}
	b := s.carve(n, sz)
	l := a.locals.pin()
	if hit {
		percpu.Inc(&l.hits)
	} else {
		percpu.Inc(&l.misses)
	}
	if l.cur == nil {
		l.cur = s
		s = nil
	}
	a.locals.unpin(l)
	if s != nil && a.retries > 0 { // another goroutine installed a shard on this P meanwhile
		a.spareMu.Lock()
		a.retire(s)
		a.spareMu.Unlock()
	}
	return b
}

// reuse retires old and looks at up to Retries retired shards, oldest
// first, for one that can serve sz bytes.
func (a *Arena) reuse(old *shard, sz int) *shard {
	if a.retries == 0 {
		return nil // old goes to the garbage collector when its buffers do
	}
	a.spareMu.Lock()
	defer a.spareMu.Unlock()
	if old != nil {
		a.retire(old)
	}
	gen := gcGen.Load()
	for i := 0; i < a.retries && a.spareLen > 0; i++ {
		t := a.pop()
		if t.fits(sz) {
			return t
		}
		a.keepFresh(t, gen)
	}
	return nil
}

// retire queues a shard; a.spareMu is held.
func (a *Arena) retire(s *shard) {
	if a.spareLen == 0 {
		watchSpare(a) // the queue ages even if Make is never called again
	}
	s.retired = gcGen.Load()
	a.push(s)
}

// pop takes the oldest retired shard off the queue; a.spareMu is held and
// the queue is not empty.
func (a *Arena) pop() *shard {
	t := a.spare[a.spareHead]
	a.spare[a.spareHead] = nil
	a.spareHead = (a.spareHead + 1) % len(a.spare)
	a.spareLen--
	return t
}

// keepFresh queues t again, at the back, unless it has found no taker for
// two collections: then the garbage collector has it once its last buffer
// is released. a.spareMu is held.
func (a *Arena) keepFresh(t *shard, gen uint32) {
	if gen-t.retired < 2 {
		a.push(t)
	}
}

func (a *Arena) push(s *shard) {
	if a.spareLen == len(a.spare) {
		grown := make([]*shard, max(8, 2*len(a.spare)))
		for i := range a.spareLen {
			grown[i] = a.spare[(a.spareHead+i)%len(a.spare)]
		}
		a.spare, a.spareHead = grown, 0
	}
	a.spare[(a.spareHead+a.spareLen)%len(a.spare)] = s
	a.spareLen++
}

// Done releases the buffer. It returns ErrDoubleDone, and changes nothing,
// if this allocation was already released through a copy of the handle or
// its shard has been recycled. Calling Done again on the same handle is a
// no-op.
func (b *Buf) Done() error {
	s := b.s
	if s == nil {
		return nil
	}
	b.s, b.B = nil, nil
	a := s.arena
	if s == a.heap {
		count(&a.locals, func(l *arenaLocal) *uint64 { percpu.Inc(&l.puts); return &l.dropped })
		return nil
	}
	g := b.off / granule
	w := &s.words[g/32]
	bit := uint64(1) << (g % 32)
	for {
		old := w.Load()
		if uint32(old>>32) != b.epoch || old&bit == 0 {
			count(&a.locals, func(l *arenaLocal) *uint64 { return &l.rejected })
			return ErrDoubleDone
		}
		if w.CompareAndSwap(old, old&^bit) {
			break
		}
	}
	id := percpu.Pin()
	if id < len(a.locals.all) {
		l := &a.locals.all[id]
		percpu.Acquire(unsafe.Pointer(l))
		percpu.Inc(&l.puts)
		percpu.Release(unsafe.Pointer(l))
		percpu.Unpin()
		return nil
	}
	percpu.Unpin()
	count(&a.locals, func(l *arenaLocal) *uint64 { return &l.puts })
	return nil
}

// Stats returns a snapshot of the arena's counters. Plain allocations for
// large requests count as misses, and as dropped when released.
func (a *Arena) Stats() Stats {
	var st Stats
	a.locals.each(func(l *arenaLocal) { l.counts.addTo(&st) })
	st.BytesHeld = a.held.Load()
	return st
}

// Len returns len(b.B).
func (b *Buf) Len() int { return len(b.B) }

// Clear zeroes the buffer's bytes (they are not zeroed by Make).
func (b *Buf) Clear() { clear(b.B) }

// watchSpare drops, after each garbage collection, the retired shards of a
// that have found no taker for two collections, until a's queue is empty
// or a itself is collected. It holds a only weakly.
func watchSpare(a *Arena) {
	if a.watching {
		return
	}
	a.watching = true
	startGCGen()
	armSpare(weak.Make(a))
}

func armSpare(w weak.Pointer[Arena]) {
	runtime.AddCleanup(new(gcSentinel), func(w weak.Pointer[Arena]) {
		if a := w.Value(); a != nil && a.pruneSpare() {
			armSpare(w)
		}
	}, w)
}

// pruneSpare drops the queued shards retired two or more collections ago
// and reports whether any are left to watch.
func (a *Arena) pruneSpare() bool {
	a.spareMu.Lock()
	defer a.spareMu.Unlock()
	gen := gcGen.Load()
	for range a.spareLen {
		a.keepFresh(a.pop(), gen)
	}
	if a.spareLen == 0 {
		a.watching = false
		return false
	}
	return true
}
