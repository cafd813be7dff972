package pool

import (
	"fmt"
	"math"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/zeroio/zeroio/internal/percpu"
)

// maxSlab bounds a slab's bytes: what one allocation can get (the Go heap
// spans at most 2^48 bytes on 64-bit platforms), so that too large a slab
// is an error from NewSlab, not a panic in make.
const maxSlab = min(math.MaxInt, 1<<47)

// SlabOptions configures a [Slab].
type SlabOptions struct {
	// SlotSize is the capacity of every buffer, in bytes (> 0).
	SlotSize int
	// Slots is the number of buffers (> 0). The slab allocates
	// SlotSize*Slots bytes once and never more.
	Slots int
	// PerPCache lets each P (GOMAXPROCS of them) keep the last slot Put
	// on it for its next Get. A Get/Put pair that hits that cache costs
	// one compare-and-swap instead of two, about 0.6 times the time. The
	// price: a slot cached by one P is invisible to Gets on the others, so
	// Get can fall back to the heap, and TryGet report ErrExhausted, while
	// up to one free slot per other P sits in those caches (including Ps
	// removed when GOMAXPROCS shrinks, whose slots stay there). Leave it
	// off where the slot count is a hard admission limit. The memory bound
	// and the misuse checks are the same either way.
	PerPCache bool
}

// Slab is a bounded pool of fixed-size buffers carved from one contiguous
// allocation: the memory it holds never exceeds SlotSize*Slots bytes of
// buffers, plus its bookkeeping: 2 bytes per slot of bitmap (6 with
// PerPCache), counted in Stats.BytesHeld.
//
// Get and Put are lock-free, allocate nothing, and cost one
// compare-and-swap each. Free slots are bits in a bitmap whose words sit on
// cache lines of their own: Put sets its slot's bit, and the same CAS finds
// a double Put (the bit is already set), even when two goroutines race to
// return one buffer; Get clears the lowest set bit of a word, starting from
// the word its P last used, so Ps work on different lines and any P can
// take any free slot: none is ever stranded.
//
// With [SlabOptions].PerPCache, each P also keeps the last slot Put on it,
// and every slot has an owner word: Put claims it back with a
// compare-and-swap (which is what finds a double Put then), and a Get
// served from its P's cache marks it handed out with a plain store, the
// one writer a cached slot can have. A Get/Put pair on one P is then one
// compare-and-swap, at the cost of slots stranded in other Ps' caches (see
// the option).
//
// When every slot is taken, [Slab.Get] never waits: it returns a heap
// allocation of the same size and counts a miss, and [Slab.TryGet] returns
// [ErrExhausted]. Finding that out, or a free slot in a nearly full slab,
// reads every bitmap word (Slots/64 of them).
//
// # Misuse contract
//
// Put finds the slot from the buffer's address, so it works on any reslice
// that keeps the start and some capacity (b[:0], b[:n]); b[:0:0] is
// refused as [ErrForeign], since it cannot be told from the end of the
// slot before (b[size:]). It returns an error, counts it in
// Stats.Rejected and leaves the slab unchanged for:
//   - a buffer that starts inside the slab but not at a slot boundary
//     (resliced from the middle), or is longer than a slot: [ErrForeign];
//   - a slot that is already free (double Put, including two goroutines
//     returning the same buffer at once): [ErrDoublePut].
//
// A buffer outside the slab with the slot capacity is taken to be a heap
// fallback from Get and dropped for the garbage collector (Stats.Dropped);
// any other buffer outside the slab is [ErrForeign].
//
// What no address-based pool can see is a "late" Put: a buffer Put, handed
// out again, then Put again by its first owner while the second still uses
// it. The caller must not touch a buffer after Put.
type Slab struct {
	size  int
	n     int
	mem   []byte
	base  uintptr
	recip uint64 // ceil(2^64/size), for dividing offsets below 2^32
	words []slabWord
	// owned, with PerPCache only: 1 while a slot is handed out, 0 while it
	// is free (in the bitmap, in a P's cache, or between the two in Put).
	// The words are packed, 4 bytes per slot: Ps start taking slots from
	// bitmap words far apart (see NewSlab), so the slots they cycle are
	// rarely neighbours. Giving each word a cache line of its own would
	// cost a cache line per slot touched, serial and parallel alike,
	// which outweighs the false sharing it avoids.
	owned  []uint32
	locals perP[slabLocal]
}

// slabWord holds the free bits of 64 slots on a cache line of its own.
type slabWord struct {
	free atomic.Uint64
	_    [percpu.CacheLine - 8]byte
}

type slabLocal struct {
	// The 64-bit words first, so that atomic loads of them are aligned on
	// 32-bit platforms too.
	cached uint64 // PerPCache: index+1 of this P's free slot, 0 for none
	counts
	hint int // the bitmap word this P last took from or returned to
	_    [percpu.CacheLine - (2*8+5*8)%percpu.CacheLine]byte
}

// NewSlab returns a Slab of o.Slots buffers of o.SlotSize bytes each. It
// returns an error for a non-positive size or count, or a total that does
// not fit in memory addresses.
func NewSlab(o SlabOptions) (*Slab, error) {
	if o.SlotSize <= 0 || o.Slots <= 0 {
		return nil, fmt.Errorf("pool: slab needs SlotSize > 0 and Slots > 0, got %d and %d", o.SlotSize, o.Slots)
	}
	if uint64(o.Slots) >= 1<<32-1 || uint64(o.SlotSize) > maxSlab/uint64(o.Slots) {
		return nil, fmt.Errorf("pool: slab of %d slots of %d bytes is too large", o.Slots, o.SlotSize)
	}
	s := &Slab{
		size:  o.SlotSize,
		n:     o.Slots,
		mem:   make([]byte, o.SlotSize*o.Slots),
		words: make([]slabWord, (o.Slots+63)/64),
	}
	s.base = uintptr(unsafe.Pointer(unsafe.SliceData(s.mem)))
	if o.PerPCache {
		s.owned = make([]uint32, o.Slots)
	}
	if uint64(o.SlotSize) < 1<<32 {
		// Lemire, Kaser, Kurz, "Faster remainder by direct computation"
		// (2019): for n, d < 2^32, n/d is the high word of ceil(2^64/d)*n.
		s.recip = ^uint64(0)/uint64(o.SlotSize) + 1
	}
	for i := range s.words {
		left := o.Slots - i*64
		if left >= 64 {
			s.words[i].free.Store(^uint64(0))
		} else {
			s.words[i].free.Store(1<<left - 1)
		}
	}
	s.locals.init()
	for i := range s.locals.all { // spread the Ps over the bitmap
		s.locals.all[i].hint = i * len(s.words) / len(s.locals.all)
	}
	return s, nil
}

// SlotSize returns the capacity of the slab's buffers.
func (s *Slab) SlotSize() int { return s.size }

// Slots returns the number of buffers in the slab.
func (s *Slab) Slots() int { return s.n }

func (s *Slab) slot(i int) []byte {
	off := i * s.size
	return s.mem[off : off+s.size : off+s.size]
}

// Get returns a free slot with length and capacity SlotSize. When every
// slot is taken it returns a new heap buffer of the same size and counts a
// miss; it never waits.
func (s *Slab) Get() []byte {
	if b, ok := s.get(); ok {
		return b
	}
	count(&s.locals, func(l *slabLocal) *uint64 { return &l.misses })
	return make([]byte, s.size)
}

// TryGet is Get without the heap fallback: it returns ErrExhausted when
// every slot is taken.
func (s *Slab) TryGet() ([]byte, error) {
	if b, ok := s.get(); ok {
		return b, nil
	}
	return nil, ErrExhausted
}

func (s *Slab) get() ([]byte, bool) {
	id := percpu.Pin()
	if id >= len(s.locals.all) {
		percpu.Unpin()
		i, ok := s.take(0)
		if ok {
			if s.owned != nil {
				s.handOut(i)
			}
			count(&s.locals, func(l *slabLocal) *uint64 { return &l.hits })
			return s.slot(i), true
		}
		return nil, false
	}
	l := &s.locals.all[id]
	percpu.Acquire(unsafe.Pointer(l))
	if s.owned != nil && l.cached != 0 {
		i := int(l.cached - 1)
		percpu.Set(&l.cached, 0)
		s.handOut(i)
		percpu.Inc(&l.hits)
		percpu.Release(unsafe.Pointer(l))
		percpu.Unpin()
		return s.slot(i), true
	}
	i, ok := s.take(l.hint)
	if ok {
		l.hint = i / 64
		if s.owned != nil {
			s.handOut(i)
		}
		percpu.Inc(&l.hits)
	}
	percpu.Release(unsafe.Pointer(l))
	percpu.Unpin()
	if !ok {
		return nil, false
	}
	return s.slot(i), true
}

// handOut marks slot i handed out. The caller holds the slot exclusively
// (it came out of its P's cache or off the bitmap), so no other write can
// race with this one; only a Put of the same slot, a double Put racing the
// Get, can read it concurrently, and its compare-and-swap sees 0 or 1.
// The store needs no lock prefix: it is published to whoever later Puts
// the buffer by whatever hands the buffer over. Under the race detector it
// is atomic, so that those misuse tests are not reported as races.
func (s *Slab) handOut(i int) {
	if percpu.RaceEnabled {
		atomic.StoreUint32(&s.owned[i], 1)
		return
	}
	s.owned[i] = 1
}

// take clears a free bit, looking at every word once, from word w on.
func (s *Slab) take(w int) (int, bool) {
	for range s.words {
		fw := &s.words[w].free
		for {
			old := fw.Load()
			if old == 0 {
				break
			}
			if fw.CompareAndSwap(old, old&(old-1)) {
				return w*64 + bits.TrailingZeros64(old), true
			}
		}
		if w++; w == len(s.words) {
			w = 0
		}
	}
	return 0, false
}

// Put returns a buffer to the slab. It returns nil when the buffer was
// accepted (a slot made free again, or a heap fallback dropped), and
// ErrDoublePut or ErrForeign, without changing the slab, for misuse.
func (s *Slab) Put(b []byte) error {
	if cap(b) == 0 {
		count(&s.locals, func(l *slabLocal) *uint64 { return &l.rejected })
		return ErrForeign
	}
	off := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))) - s.base)
	if off >= uint64(len(s.mem)) {
		if cap(b) == s.size {
			count(&s.locals, func(l *slabLocal) *uint64 { percpu.Inc(&l.puts); return &l.dropped })
			return nil
		}
		count(&s.locals, func(l *slabLocal) *uint64 { return &l.rejected })
		return ErrForeign
	}
	var i uint64
	if off < 1<<32 && s.recip != 0 {
		i, _ = bits.Mul64(s.recip, off)
	} else {
		i = off / uint64(s.size)
	}
	if i*uint64(s.size) != off || cap(b) > s.size {
		count(&s.locals, func(l *slabLocal) *uint64 { return &l.rejected })
		return ErrForeign
	}
	fw := &s.words[i/64].free
	bit := uint64(1) << (i % 64)
	if s.owned != nil {
		if !atomic.CompareAndSwapUint32(&s.owned[i], 1, 0) {
			count(&s.locals, func(l *slabLocal) *uint64 { return &l.rejected })
			return ErrDoublePut
		}
		id := percpu.Pin()
		if id < len(s.locals.all) {
			l := &s.locals.all[id]
			percpu.Acquire(unsafe.Pointer(l))
			if l.cached == 0 {
				percpu.Set(&l.cached, i+1)
				percpu.Release(unsafe.Pointer(l))
				percpu.Unpin()
				return nil
			}
			percpu.Release(unsafe.Pointer(l))
		}
		percpu.Unpin()
		fw.Or(bit)
		return nil
	}
	for {
		old := fw.Load()
		if old&bit != 0 {
			count(&s.locals, func(l *slabLocal) *uint64 { return &l.rejected })
			return ErrDoublePut
		}
		if fw.CompareAndSwap(old, old|bit) {
			// No counter here: Stats derives the slots handed out from the
			// bitmap, so a Put is one compare-and-swap and nothing else.
			return nil
		}
	}
}

// Stats returns a snapshot of the slab's counters. BytesHeld is always
// SlotSize*Slots plus the bitmap and owner words. Outstanding counts the slots neither in the bitmap nor in
// a P's cache (read word by word, so it may mix moments under concurrent
// use) plus heap fallbacks not yet returned.
func (s *Slab) Stats() Stats {
	var st Stats
	s.locals.each(func(l *slabLocal) { l.counts.addTo(&st) })
	// Slot Puts are not counted (see Put): addTo computed hits + misses -
	// heap puts. Replace the slot part with what the bitmap says.
	st.Outstanding -= int64(st.Hits)
	free := 0
	for i := range s.words {
		free += bits.OnesCount64(s.words[i].free.Load())
	}
	s.locals.each(func(l *slabLocal) {
		if percpu.Load(&l.cached) != 0 {
			free++
		}
	})
	st.Outstanding += int64(s.n - free)
	st.BytesHeld = int64(len(s.mem)) + int64(len(s.words))*int64(unsafe.Sizeof(slabWord{})) + 4*int64(len(s.owned))
	return st
}
