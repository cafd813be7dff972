package pool

import (
	"fmt"
	"math"
	"sync/atomic"
	"unsafe"

	"github.com/zeroio/zeroio/internal/percpu"
)

// SlabOptions configures a [Slab].
type SlabOptions struct {
	// SlotSize is the capacity of every buffer, in bytes (> 0).
	SlotSize int
	// Slots is the number of buffers (> 0). The slab allocates
	// SlotSize*Slots bytes once and never more.
	Slots int
}

// Slab is a bounded pool of fixed-size buffers carved from one contiguous
// allocation: the memory it holds never exceeds SlotSize*Slots bytes.
//
// Get and Put are lock-free and allocate nothing. Free slots live in small
// per-P stacks touched without atomic instructions, backed by a shared
// lock-free stack; every slot also has an owner word that Put claims with a
// compare-and-swap, which is what makes a double Put detectable even when two
// goroutines race to return the same buffer.
//
// When every slot is taken, [Slab.Get] never waits: it returns a heap
// allocation of the same size and counts a miss, and [Slab.TryGet] returns
// [ErrExhausted]. A miss can also happen while a few free slots sit in the
// per-P stacks of other Ps: at most 16 per P and never more than a
// sixteenth of the slab (slabs under 32 slots per P use no per-P stacks).
// The getter that missed asks every P to hand its stack back, which each
// does on its next Get or Put.
//
// # Misuse contract
//
// Put finds the slot from the buffer's address, so it works on any reslice
// that keeps the start (b[:0], b[:n]). It returns an error, counts it in
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
	size   int
	n      int
	mem    []byte
	base   uintptr
	owned  []atomic.Uint32 // 1 while a slot is handed out
	next   []atomic.Uint32 // shared stack links: index+1, 0 ends
	head   paddedU64       // shared stack head: tag<<32 | (index+1)
	drain  paddedU32       // bumped by a getter that missed
	locals perP[slabLocal]
	lcap   int
}

type paddedU64 struct {
	atomic.Uint64
	_ [percpu.CacheLine - 8]byte
}

type paddedU32 struct {
	atomic.Uint32
	_ [percpu.CacheLine - 4]byte
}

const slabLocalMax = 16

type slabLocal struct {
	free    [slabLocalMax]uint32
	n       int
	drained uint32
	counts
	_ [percpu.CacheLine - (slabLocalMax*4+8+8+5*8)%percpu.CacheLine]byte
}

// NewSlab returns a Slab of o.Slots buffers of o.SlotSize bytes each. It
// returns an error for a non-positive size or count, or a total that does
// not fit in memory addresses.
func NewSlab(o SlabOptions) (*Slab, error) {
	if o.SlotSize <= 0 || o.Slots <= 0 {
		return nil, fmt.Errorf("pool: slab needs SlotSize > 0 and Slots > 0, got %d and %d", o.SlotSize, o.Slots)
	}
	if uint64(o.Slots) >= 1<<32-1 || uint64(o.SlotSize) > uint64(math.MaxInt)/uint64(o.Slots) {
		return nil, fmt.Errorf("pool: slab of %d slots of %d bytes is too large", o.Slots, o.SlotSize)
	}
	s := &Slab{
		size:  o.SlotSize,
		n:     o.Slots,
		mem:   make([]byte, o.SlotSize*o.Slots),
		owned: make([]atomic.Uint32, o.Slots),
		next:  make([]atomic.Uint32, o.Slots),
	}
	s.base = uintptr(unsafe.Pointer(unsafe.SliceData(s.mem)))
	s.locals.init()
	// Per-P stacks may hold at most a sixteenth of the slots between them.
	s.lcap = min(slabLocalMax, o.Slots/(16*len(s.locals.all)))
	if s.lcap < 2 {
		s.lcap = 0
	}
	// Push in reverse so the first Gets return slots in address order.
	for i := o.Slots - 1; i >= 0; i-- {
		s.push(uint32(i))
	}
	return s, nil
}

// SlotSize returns the capacity of the slab's buffers.
func (s *Slab) SlotSize() int { return s.size }

// Slots returns the number of buffers in the slab.
func (s *Slab) Slots() int { return s.n }

func (s *Slab) push(i uint32) {
	for {
		h := s.head.Load()
		s.next[i].Store(uint32(h))
		if s.head.CompareAndSwap(h, (h>>32+1)<<32|uint64(i+1)) {
			return
		}
	}
}

func (s *Slab) pop() (uint32, bool) {
	for {
		h := s.head.Load()
		top := uint32(h)
		if top == 0 {
			return 0, false
		}
		// The tag in the high half makes a stale head fail the CAS even if
		// the same index came back (ABA).
		nx := s.next[top-1].Load()
		if s.head.CompareAndSwap(h, (h>>32+1)<<32|uint64(nx)) {
			return top - 1, true
		}
	}
}

func (s *Slab) slot(i uint32) []byte {
	off := int(i) * s.size
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
	if id < len(s.locals.all) {
		l := &s.locals.all[id]
		percpu.Acquire(unsafe.Pointer(l))
		if l.drained != s.drain.Load() {
			s.drainLocal(l)
		}
		if l.n > 0 {
			l.n--
			i := l.free[l.n]
			percpu.Inc(&l.hits)
			percpu.Release(unsafe.Pointer(l))
			percpu.Unpin()
			s.owned[i].Store(1)
			return s.slot(i), true
		}
		percpu.Release(unsafe.Pointer(l))
	}
	percpu.Unpin()
	i, ok := s.pop()
	if !ok {
		// Free slots may sit in other Ps' stacks: ask them to hand them
		// back on their next operation, and report this one as a miss.
		if s.lcap > 0 {
			s.drain.Add(1)
		}
		return nil, false
	}
	s.owned[i].Store(1)
	count(&s.locals, func(l *slabLocal) *uint64 { return &l.hits })
	return s.slot(i), true
}

// drainLocal moves a pinned per-P stack to the shared stack.
func (s *Slab) drainLocal(l *slabLocal) {
	for l.n > 0 {
		l.n--
		s.push(l.free[l.n])
	}
	l.drained = s.drain.Load()
}

// Put returns a buffer to the slab. It returns nil when the buffer was
// accepted (a slot made free again, or a heap fallback dropped), and
// ErrDoublePut or ErrForeign, without changing the slab, for misuse.
func (s *Slab) Put(b []byte) error {
	if cap(b) == 0 {
		count(&s.locals, func(l *slabLocal) *uint64 { return &l.rejected })
		return ErrForeign
	}
	off := uintptr(unsafe.Pointer(unsafe.SliceData(b))) - s.base
	if off >= uintptr(len(s.mem)) {
		if cap(b) == s.size {
			count(&s.locals, func(l *slabLocal) *uint64 { percpu.Inc(&l.puts); return &l.dropped })
			return nil
		}
		count(&s.locals, func(l *slabLocal) *uint64 { return &l.rejected })
		return ErrForeign
	}
	i := uint32(off / uintptr(s.size))
	if off%uintptr(s.size) != 0 || cap(b) > s.size {
		count(&s.locals, func(l *slabLocal) *uint64 { return &l.rejected })
		return ErrForeign
	}
	if !s.owned[i].CompareAndSwap(1, 0) {
		count(&s.locals, func(l *slabLocal) *uint64 { return &l.rejected })
		return ErrDoublePut
	}
	id := percpu.Pin()
	if id < len(s.locals.all) {
		l := &s.locals.all[id]
		percpu.Acquire(unsafe.Pointer(l))
		if l.drained != s.drain.Load() {
			s.drainLocal(l)
		}
		percpu.Inc(&l.puts)
		if l.n < s.lcap {
			l.free[l.n] = i
			l.n++
			percpu.Release(unsafe.Pointer(l))
			percpu.Unpin()
			return nil
		}
		percpu.Release(unsafe.Pointer(l))
		percpu.Unpin()
	} else {
		percpu.Unpin()
		count(&s.locals, func(l *slabLocal) *uint64 { return &l.puts })
	}
	s.push(i)
	return nil
}

// Stats returns a snapshot of the slab's counters. BytesHeld is always
// SlotSize*Slots.
func (s *Slab) Stats() Stats {
	var st Stats
	s.locals.each(func(l *slabLocal) { l.counts.addTo(&st) })
	st.BytesHeld = int64(len(s.mem))
	return st
}
