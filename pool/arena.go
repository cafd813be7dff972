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
// Make returns a [Buf] by value and allocates nothing; carving from the
// P's shard takes no atomic read-modify-write instruction. Every allocation
// in a shard has a release bit in a word tagged with the shard's reuse
// epoch; Done sets it with a compare-and-swap, so releasing the same
// allocation twice, through copies of the handle or after the shard was
// recycled, is detected and refused ([ErrDoubleDone]) instead of letting a
// shard be reused under a live buffer.
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
//     a shard) are neither tracked nor counted: Done on any handle of one,
//     copy or not, returns nil and changes nothing. No bytes are shared
//     either way.
type Arena struct {
	half      int // requests above this are plain allocations
	shardSize int
	retries   int
	locals    perP[arenaLocal]
	spareMu   sync.Mutex
	spare     []*shard // FIFO ring of retired shards
	spareHead int
	spareLen  int
	watching  bool          // watchSpare is armed; under spareMu
	held      *atomic.Int64 // its own allocation: see heldRef
}

type arenaLocal struct {
	cur *shard
	counts
	_ [percpu.CacheLine - (8+5*8)%percpu.CacheLine]byte
}

// granule is the alignment of every allocation in a shard, and the unit
// of its release bitmap.
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
	// last is the bitmap word carved in last in this epoch (noWord before
	// the first), and lastCarved the bits of the allocations carved in it;
	// used lists, in order, the words carved in before it with their bits,
	// and the ones before used[live] have been seen fully released since
	// (they stay so: carving only moves forward). Touched only by the
	// owner. Comparing these words with what was carved, rather than
	// keeping a count of the buffers still out, spares every Make an atomic
	// instruction and every Done a shared counter; it costs at most one
	// load per buffer carved.
	last, lastCarved uint32
	used             []usedWord
	nused            int
	live             int
	arena            *Arena
	// words hold one release bit per granule where an allocation starts
	// (low 32 bits) and the epoch those bits belong to (high 32 bits), so
	// that Done's compare-and-swap checks both at once. The owner stores
	// the epoch, with no bit set, when it first carves in a word in an
	// epoch; only Done sets bits.
	words []atomic.Uint64
}

// usedWord is a bitmap word carved in this epoch and the bits of the
// allocations carved in it.
type usedWord struct{ word, carved uint32 }

const noWord = math.MaxUint32

// Buf is a buffer carved from an [Arena]. Handles are values: copying one
// copies the right to release it once.
type Buf struct {
	// B has length and capacity n, as asked of Make.
	B     []byte
	s     *shard // nil for a plain allocation
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
	a := &Arena{half: o.ShardSize / 2, shardSize: o.ShardSize, retries: o.Retries, held: new(atomic.Int64)}
	a.locals.init()
	return a, nil
}

func (a *Arena) newShard() *shard {
	// One allocation holds the bitmap words, the used list and the bytes.
	nw := (a.shardSize + 32*granule - 1) / (32 * granule)
	block := make([]atomic.Uint64, 2*nw+(a.shardSize+7)/8)
	s := &shard{shardState: shardState{
		mem:   unsafe.Slice((*byte)(unsafe.Pointer(&block[2*nw])), a.shardSize),
		used:  unsafe.Slice((*usedWord)(unsafe.Pointer(&block[nw])), nw),
		last:  noWord,
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
	return s.off+sz <= len(s.mem) || s.recycle(sz)
}

// recycle starts a full shard over, in a new epoch, if every allocation
// carved in this epoch has been released, and reports whether it then
// serves sz bytes.
func (s *shard) recycle(sz int) bool {
	for ; s.live < s.nused; s.live++ {
		if u := s.used[s.live]; uint32(s.words[u.word].Load()) != u.carved {
			return false
		}
	}
	if s.last != noWord && uint32(s.words[s.last].Load()) != s.lastCarved {
		return false
	}
	// Nothing of this epoch is live: start over. Done calls for the old
	// epoch now fail their CAS on the epoch half of each word carved anew,
	// and find their bit already set in the others. A shard whose epoch
	// would wrap is not recycled (it ages out of the spare queue), so a
	// handle from 2^32 reuses ago can never match again.
	if s.epoch == math.MaxUint32 {
		return false
	}
	s.epoch++
	s.off = 0
	s.last = noWord
	s.nused = 0
	s.live = 0
	return sz <= len(s.mem)
}

// carve allocates n bytes (sz after rounding) from an owned shard that fits.
func (s *shard) carve(n, sz int) Buf {
	off := s.bump(sz)
	return Buf{B: s.mem[off : off+n : off+n], s: s, off: uint32(off), epoch: s.epoch}
}

// bump takes sz bytes from an owned shard that fits and returns their
// offset.
func (s *shard) bump(sz int) int {
	off := s.off
	s.off = off + sz
	g := uint32(off) / granule
	if g/32 != s.last {
		s.touch(g / 32)
	}
	s.lastCarved |= 1 << (g % 32)
	return off
}

// touch moves carving to bitmap word w, the first allocation of this epoch
// in it, and stamps w with the epoch and no release bit. Every allocation
// carved in w in earlier epochs has its release bit set at this point, or
// the shard would not have been recycled, so no Done can succeed on w
// concurrently.
func (s *shard) touch(w uint32) {
	if s.last != noWord {
		s.used[s.nused] = usedWord{word: s.last, carved: s.lastCarved}
		s.nused++
	}
	s.last, s.lastCarved = w, 0
	s.words[w].Store(uint64(s.epoch) << 32)
}

// Make returns a buffer of length and capacity n. Requests for more than
// half a shard, and for 0 bytes, are plain allocations. Make panics if n is
// negative, as make does.
func (a *Arena) Make(n int) Buf {
	if uint(n-1) >= uint(a.half) {
		if n < 0 {
			panic("pool: Arena.Make with negative size")
		}
		return Buf{B: make([]byte, n)}
	}
	sz := (n + granule - 1) &^ (granule - 1)
	id := percpu.Pin()
	if id < len(a.locals.all) {
		l := &a.locals.all[id]
		percpu.Acquire(unsafe.Pointer(l))
		if s := l.cur; s != nil && s.fits(sz) {
			// The handle is built after Unpin from scalars: s.mem never
			// changes, and a Buf held across the call would be copied
			// through the stack in pieces that stall store forwarding.
			off, epoch := s.bump(sz), s.epoch
			percpu.Inc(&l.hits)
			percpu.Release(unsafe.Pointer(l))
			percpu.Unpin()
			return Buf{B: s.mem[off : off+n : off+n], s: s, off: uint32(off), epoch: epoch}
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
	if b.s == nil {
		b.B = nil
		return nil
	}
	return b.release()
}

// release clears the handle and sets its allocation's release bit, if it
// is of the word's epoch and not set yet.
func (b *Buf) release() error {
	s := b.s
	b.s, b.B = nil, nil
	g := b.off / granule
	w := &s.words[g/32]
	bit := uint64(1) << (g % 32)
	a := s.arena
	for {
		old := w.Load()
		if uint32(old>>32) != b.epoch || old&bit != 0 {
			count(&a.locals, func(l *arenaLocal) *uint64 { return &l.rejected })
			return ErrDoubleDone
		}
		if w.CompareAndSwap(old, old|bit) {
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

// Stats returns a snapshot of the arena's counters. They cover the buffers
// carved from shards: a buffer carved from a new shard is a miss, from one
// the arena held a hit. Plain allocations (for 0 bytes and requests above
// half a shard) are make behind a size check and are not counted.
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
