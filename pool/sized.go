package pool

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/zeroio/zeroio/internal/percpu"
)

const (
	minShift = 6 // smallest class: 64 B
	// maxShiftLimit bounds the configurable maximum (1 GiB).
	maxShiftLimit = 30
	nClasses      = maxShiftLimit - minShift + 1
	// localShift is the largest class cached per P (64 KiB). One idle
	// buffer per class per P is at most 128 KiB per P.
	localShift = 16
	nLocal     = localShift - minShift + 1

	// DefaultMaxSize is the largest capacity a Sized pool keeps unless
	// configured otherwise.
	DefaultMaxSize = 1 << 20
)

// SizedOptions configures a [Sized] pool.
type SizedOptions struct {
	// MaxSize is the largest buffer capacity the pool keeps, rounded up to
	// a power of two; 0 means DefaultMaxSize (1 MiB). At most 1 GiB.
	// Larger requests are served by plain allocations that are never kept.
	MaxSize int
}

// Sized is a pool of byte buffers in power-of-two size classes from 64 B
// to a configurable maximum (1 MiB by default).
//
// Each P keeps one idle buffer per class up to 64 KiB in a cache touched
// without atomic instructions; behind it each class has a sync.Pool of
// buffer pointers (pointer-shaped values, so Put allocates nothing). Get and
// Put allocate nothing in steady state, and buffers left idle are released
// by the garbage collector within a few cycles, as sync.Pool's are. The
// exception is the per-P cache, at most 128 KiB per P: a P hands it to the
// sync.Pools at its first miss after a collection, so an idle P, or one
// that only ever hits, keeps it.
//
// # Misuse contract
//
//   - Put of a buffer whose capacity is not a class size (under 64, not a
//     power of two, or resliced so its capacity shrank) is rejected:
//     counted in Stats.Rejected, never pooled.
//   - Put of a buffer above the maximum is dropped for the garbage
//     collector (Stats.Dropped): one huge request never pins memory.
//     Such a buffer carries no marker, so a double Put of it is not
//     detected: it counts two drops, and Stats.Outstanding goes one below
//     the truth.
//   - Put of a buffer that is already in the pool (a double Put) is
//     detected by a keyed marker the pool writes into idle buffers, and
//     rejected. The check is a plain load and store, not an atomic
//     instruction: two goroutines that Put the same buffer at the same
//     moment (a data race on the buffer, which -race reports) may both get
//     it in, and it cannot see a "late" Put: a buffer Put, handed out again
//     by Get, then Put again by its first owner. As with sync.Pool, the
//     caller must not touch a buffer after Put. ([Slab] refuses a
//     concurrent double Put too, for an atomic operation per Put.)
//   - Put of a buffer that starts inside a larger one (b[8:72:72]) is
//     rejected when its start is not aligned to its class, as a real
//     buffer of a class up to 8 KiB always is. Go aligns larger buffers to
//     8 KiB only, so above that only 8 KiB alignment is checked, and a
//     piece of a larger buffer that starts on an 8 KiB boundary is adopted,
//     like the tails below.
//   - Put of a foreign buffer with a class capacity and an aligned start
//     is adopted: it is just memory, and the pool hands it out as its own.
//     That includes an aligned tail or head of a pooled buffer (b[2048:]
//     or b[:64:64] of a 4096-byte b), which the pool cannot tell from a
//     buffer of that size: Put it, or b, never both.
//
// The contents of a buffer from Get are unspecified (not zeroed).
type Sized struct {
	maxSize int // the largest class kept, a power of two
	locals  perP[sizedLocal]
	classes [nClasses]sync.Pool // of unsafe.Pointer to the first byte
	key     uint64              // secret for the idle marker
	held    *atomic.Int64       // its own allocation: see heldRef
}

type sizedLocal struct {
	slots [nLocal]unsafe.Pointer
	gen   uint32
	counts
	_ [percpu.CacheLine - (nLocal*8+8+5*8)%percpu.CacheLine]byte
}

// NewSized returns a Sized pool.
func NewSized(o SizedOptions) *Sized {
	max := o.MaxSize
	if max <= 0 {
		max = DefaultMaxSize
	}
	shift := uint(bits.Len(uint(max - 1)))
	if shift < minShift {
		shift = minShift
	}
	if shift > maxShiftLimit {
		panic(fmt.Sprintf("pool: SizedOptions.MaxSize %d above the 1 GiB limit", o.MaxSize))
	}
	p := &Sized{maxSize: 1 << shift, held: new(atomic.Int64)}
	p.locals.init()
	var k [8]byte
	_, _ = rand.Read(k[:]) // crypto/rand.Read never fails on supported platforms
	p.key = binary.LittleEndian.Uint64(k[:]) | 1
	gen := gcGen.Load()
	for i := range p.locals.all {
		p.locals.all[i].gen = gen
	}
	p.locals.spill.gen = gen
	startGCGen()
	return p
}

// MaxSize returns the largest capacity the pool keeps.
func (p *Sized) MaxSize() int { return p.maxSize }

// classOf returns the class index for a request of n bytes, 0 <= n <= max.
func classOf(n int) uint {
	if n <= 1<<minShift {
		return 0
	}
	return uint(bits.Len(uint(n-1))) - minShift
}

// marker is the value the pool writes into the last 8 bytes of an idle
// buffer: keyed with a per-pool secret and the address, so neither user data
// nor network input can forge it. (The last bytes, not the first: a caller
// that just wrote b[0] would make an 8-byte load of the first word stall on
// store forwarding.)
func (p *Sized) marker(ptr unsafe.Pointer) uint64 { return p.key ^ uint64(uintptr(ptr)) }

// Get returns a buffer of length n and capacity the class size (the next
// power of two, at least 64). Requests above MaxSize get a plain
// allocation of exactly n bytes. Get panics if n is negative, as make does.
//
//go:nosplit
func (p *Sized) Get(n int) []byte {
	// Get and Put are nosplit: they skip the stack check of a function
	// prologue, a measurable share of a Get/Put pair this short. Their
	// frames are small and fixed, and whatever they call
	// that may need more stack (the miss paths, the shared sync.Pools) is
	// an ordinary function that checks for itself; the linker verifies
	// the rest.
	if uint(n) > uint(p.maxSize) {
		return p.getLarge(n)
	}
	c := classOf(n)
	if c < nLocal {
		id := percpu.Pin()
		if uint(id) < uint(len(p.locals.all)) {
			l := &p.locals.all[id]
			percpu.Acquire(unsafe.Pointer(l))
			// A hit takes no GC-generation check (an old buffer handed
			// out is reused, not idle); a miss ages the cache (unpinLocal).
			if ptr := l.slots[c]; ptr != nil {
				l.slots[c] = nil
				percpu.Inc(&l.hits)
				percpu.Release(unsafe.Pointer(l))
				percpu.Unpin()
				b := unsafe.Slice((*byte)(ptr), 1<<(c+minShift))
				*tail(b) = 0 // clear the idle marker
				return b[:n]
			}
			p.unpinLocal(l)
		} else {
			percpu.Unpin()
		}
	}
	return p.getSlow(c, n)
}

func (p *Sized) getSlow(c uint, n int) []byte {
	size := 1 << (c + minShift)
	if v := p.classes[c].Get(); v != nil {
		b := unsafe.Slice((*byte)(v.(unsafe.Pointer)), size)
		*tail(b) = 0
		count(&p.locals, func(l *sizedLocal) *uint64 { return &l.hits })
		return b[:n]
	}
	b := make([]byte, size)
	p.held.Add(int64(size))
	runtime.AddCleanup(&b[0], func(a heldRef) { a.held.Add(-a.n) }, heldRef{p.held, int64(size)})
	count(&p.locals, func(l *sizedLocal) *uint64 { return &l.misses })
	return b[:n]
}

// heldRef is what a buffer's cleanup needs: not the pool, so that a pool
// can be collected while its buffers live on. The counter is an allocation
// of its own: a pointer into the pool would keep the whole pool reachable
// from every buffer's cleanup, and the pool holds buffers (an Arena its
// current shards for good), so it would never be collected.
type heldRef struct {
	held *atomic.Int64
	n    int64
}

func (p *Sized) getLarge(n int) []byte {
	if n < 0 {
		panic("pool: Get with negative size")
	}
	count(&p.locals, func(l *sizedLocal) *uint64 { return &l.misses })
	return make([]byte, n)
}

// tail returns the last 8 bytes of a buffer of class capacity (>= 64, so
// aligned) as a word.
func tail(b []byte) *uint64 {
	return (*uint64)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(b)), cap(b)-8))
}

// Put returns b to the pool. See the misuse contract on [Sized]: Put never
// lets two owners share a buffer because of a malformed or double return.
//
//go:nosplit
func (p *Sized) Put(b []byte) {
	// nosplit: see Get.
	c := cap(b)
	if c > p.maxSize {
		count(&p.locals, func(l *sizedLocal) *uint64 { percpu.Inc(&l.puts); return &l.dropped })
		return
	}
	ptr := unsafe.Pointer(unsafe.SliceData(b))
	// Go allocates power-of-two sizes up to 8 KiB aligned to their size and
	// larger ones page-aligned; a start that is not is a reslice. (For a
	// power of two c, (c-1)&8191 masks the low bits of min(c, 8192).)
	if c < 1<<minShift || c&(c-1) != 0 || uintptr(ptr)&uintptr(c-1)&8191 != 0 {
		count(&p.locals, func(l *sizedLocal) *uint64 { return &l.rejected })
		return
	}
	mk := tail(b)
	m := p.marker(ptr)
	if *mk == m {
		count(&p.locals, func(l *sizedLocal) *uint64 { return &l.rejected })
		return
	}
	*mk = m
	cl := uint(bits.TrailingZeros(uint(c))) - minShift
	if cl < nLocal {
		id := percpu.Pin()
		if uint(id) < uint(len(p.locals.all)) {
			l := &p.locals.all[id]
			percpu.Acquire(unsafe.Pointer(l))
			if l.slots[cl] == nil {
				l.slots[cl] = ptr
				percpu.Inc(&l.puts)
				percpu.Release(unsafe.Pointer(l))
				percpu.Unpin()
				return
			}
			p.unpinLocal(l)
		} else {
			percpu.Unpin()
		}
	}
	p.classes[cl].Put(ptr)
	count(&p.locals, func(l *sizedLocal) *uint64 { return &l.puts })
}

// unpinLocal ends a pinned section on a per-P cache that missed: an empty
// slot on Get or a full one on Put. A miss is where the cache ages: if a
// garbage collection ran since the cache was last flushed, its buffers go
// to the shared sync.Pools, which free them after two more cycles unless
// they are used. (The hits stay free of that check; the cache a P keeps
// between misses is bounded, one buffer per class up to 64 KiB.)
func (p *Sized) unpinLocal(l *sizedLocal) {
	if l.gen != gcGen.Load() {
		p.flush(l)
		return
	}
	percpu.Release(unsafe.Pointer(l))
	percpu.Unpin()
}

// flush moves the buffers of a pinned per-P cache (not the spill slot) into
// the shared sync.Pools after a garbage collection, and unpins it.
func (p *Sized) flush(l *sizedLocal) {
	moved := l.slots
	l.slots = [nLocal]unsafe.Pointer{}
	l.gen = gcGen.Load()
	percpu.Release(unsafe.Pointer(l))
	percpu.Unpin()
	for c, ptr := range moved {
		if ptr != nil {
			p.classes[c].Put(ptr)
		}
	}
}

// Stats returns a snapshot of the pool's counters.
func (p *Sized) Stats() Stats {
	var s Stats
	p.locals.each(func(l *sizedLocal) { l.counts.addTo(&s) })
	s.BytesHeld = p.held.Load()
	return s
}

var defaultSized = NewSized(SizedOptions{})

// Default returns the Sized pool behind the package-level [Get] and [Put].
func Default() *Sized { return defaultSized }

// Get returns a buffer of length n from the default [Sized] pool.
func Get(n int) []byte { return defaultSized.Get(n) }

// Put returns a buffer obtained from [Get] to the default pool.
func Put(b []byte) { defaultSized.Put(b) }
