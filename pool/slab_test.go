package pool

import (
	"errors"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/zeroio/zeroio/internal/percpu"
)

// mustSlab returns a slab of n slots of size bytes, with per-P caches if
// perP is given and true.
func mustSlab(t testing.TB, size, n int, perP ...bool) *Slab {
	t.Helper()
	s, err := NewSlab(SlabOptions{SlotSize: size, Slots: n, PerPCache: len(perP) > 0 && perP[0]})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// slabModes runs a test on slabs without and with per-P caches.
func slabModes(t *testing.T, f func(t *testing.T, perP bool)) {
	t.Run("exact", func(t *testing.T) { f(t, false) })
	t.Run("perp", func(t *testing.T) { f(t, true) })
}

func TestSlabOptions(t *testing.T) {
	for _, o := range []SlabOptions{{SlotSize: 0, Slots: 10}, {SlotSize: 10}, {SlotSize: -1, Slots: 10}, {SlotSize: math.MaxInt / 2, Slots: 4}, {SlotSize: 1 << 30, Slots: 1 << 20}, {SlotSize: 8, PerPCache: true}} {
		if _, err := NewSlab(o); err == nil {
			t.Errorf("NewSlab(%+v) accepted", o)
		}
	}
}

func TestSlabGetPut(t *testing.T) { slabModes(t, testSlabGetPut) }

func testSlabGetPut(t *testing.T, perP bool) {
	s := mustSlab(t, 10, 10, perP)
	seen := map[*byte]bool{}
	var bufs [][]byte
	for range 10 {
		b, err := s.TryGet()
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != 10 || cap(b) != 10 {
			t.Fatalf("len %d cap %d", len(b), cap(b))
		}
		if seen[&b[0]] {
			t.Fatal("slot handed out twice")
		}
		seen[&b[0]] = true
		bufs = append(bufs, b)
	}
	if _, err := s.TryGet(); !errors.Is(err, ErrExhausted) {
		t.Fatalf("TryGet on a full slab: %v, want ErrExhausted", err)
	}
	h := s.Get() // heap fallback
	if len(h) != 10 || seen[&h[0]] {
		t.Fatal("fallback is not a fresh buffer")
	}
	if err := s.Put(h); err != nil {
		t.Fatalf("Put of the fallback: %v", err)
	}
	for _, b := range bufs {
		if err := s.Put(b[:0]); err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	if st.Hits != 10 || st.Misses != 1 || st.Outstanding != 0 || st.Dropped != 1 || st.BytesHeld != slabHeld(10, 10, perP) {
		t.Fatalf("stats %+v", st)
	}
}

// TestSlabNeverExceedsBound holds all slots from many goroutines at once:
// never more than Slots distinct slab buffers are out, and memory held is
// constant.
func TestSlabNeverExceedsBound(t *testing.T) { slabModes(t, testSlabNeverExceedsBound) }

func testSlabNeverExceedsBound(t *testing.T, perP bool) {
	s := mustSlab(t, 64, 32, perP)
	var out atomic.Int64
	var max atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				b, err := s.TryGet()
				if err != nil {
					continue
				}
				n := out.Add(1)
				for m := max.Load(); n > m && !max.CompareAndSwap(m, n); m = max.Load() {
				}
				out.Add(-1)
				if err := s.Put(b); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if max.Load() > 32 {
		t.Fatalf("%d slots out at once, bound is 32", max.Load())
	}
	if h := s.Stats().BytesHeld; h != slabHeld(64, 32, perP) {
		t.Fatalf("BytesHeld %d", h)
	}
}

func TestSlabMisuse(t *testing.T) { slabModes(t, testSlabMisuse) }

func testSlabMisuse(t *testing.T, perP bool) {
	t.Run("double-put", func(t *testing.T) {
		s := mustSlab(t, 16, 4, perP)
		b := s.Get()
		if err := s.Put(b); err != nil {
			t.Fatal(err)
		}
		if err := s.Put(b); !errors.Is(err, ErrDoublePut) {
			t.Fatalf("second Put: %v, want ErrDoublePut", err)
		}
		x, y := s.Get(), s.Get()
		if &x[0] == &y[0] {
			t.Fatal("double Put handed one slot to two owners")
		}
	})
	t.Run("resliced-from-middle", func(t *testing.T) {
		s := mustSlab(t, 16, 4, perP)
		b := s.Get()
		if err := s.Put(b[3:]); !errors.Is(err, ErrForeign) {
			t.Fatalf("Put(b[3:]): %v, want ErrForeign", err)
		}
		if err := s.Put(b[:4]); err != nil {
			t.Fatalf("Put(b[:4]) keeps the start: %v", err)
		}
	})
	t.Run("foreign", func(t *testing.T) {
		s := mustSlab(t, 16, 4, perP)
		if err := s.Put(make([]byte, 17)); !errors.Is(err, ErrForeign) {
			t.Fatalf("foreign 17-byte buffer: %v", err)
		}
		if err := s.Put(nil); !errors.Is(err, ErrForeign) {
			t.Fatalf("nil: %v", err)
		}
		other := mustSlab(t, 16, 4, perP)
		if err := s.Put(other.Get()); err != nil {
			t.Fatalf("slot-sized buffer from elsewhere is dropped, not an error: %v", err)
		}
		if st := s.Stats(); st.Rejected != 2 || st.Dropped != 1 {
			t.Fatalf("stats %+v", st)
		}
	})
	t.Run("never-handed-out", func(t *testing.T) {
		s := mustSlab(t, 16, 4, perP)
		b := s.Get()
		if err := s.Put(b); err != nil {
			t.Fatal(err)
		}
		// A slot that is free was never given to this caller.
		if err := s.Put(s.mem[16:32:32]); !errors.Is(err, ErrDoublePut) {
			t.Fatalf("free slot: %v", err)
		}
	})
	t.Run("concurrent-double-put", func(t *testing.T) {
		// Racers, one per P, wait at a spinning barrier. The last to
		// arrive releases the others and so starts ahead of them; it
		// waits a different number of spins each round, which sweeps
		// the offset between the racers' Puts across the few
		// nanoseconds where a Put that checks the slot and then stores
		// it (instead of one compare-and-swap) lets two of them
		// succeed. That catches it without the race detector.
		racers := max(2, runtime.GOMAXPROCS(0))
		rounds := 300_000
		if percpu.RaceEnabled {
			rounds = 2000 // the race detector reports such a Put itself
		}
		s := mustSlab(t, 16, 64, perP)
		for round := range rounds {
			b := s.Get()
			var ok, ready atomic.Int32
			var start atomic.Bool
			var wg sync.WaitGroup
			for range racers {
				wg.Go(func() {
					if ready.Add(1) == int32(racers) {
						start.Store(true)
						for range round % 256 {
							ready.Load()
						}
					}
					for i := 0; !start.Load(); i++ {
						if i%1024 == 1023 {
							runtime.Gosched() // fewer Ps than racers
						}
					}
					if s.Put(b) == nil {
						ok.Add(1)
					}
				})
			}
			wg.Wait()
			if ok.Load() != 1 {
				t.Fatalf("round %d: %d of %d racing Puts of one buffer succeeded", round, ok.Load(), racers)
			}
		}
	})
}

func TestSlabHammer(t *testing.T) { slabModes(t, testSlabHammer) }

func testSlabHammer(t *testing.T, perP bool) {
	s := mustSlab(t, 256, 64, perP)
	hammer(t, 64, 300, func(int) []byte { return s.Get() }, func(b []byte) {
		if err := s.Put(b); err != nil {
			t.Error(err)
		}
	})
	if o := s.Stats().Outstanding; o != 0 {
		t.Fatalf("Outstanding = %d", o)
	}
}

// TestSlabNoStranding checks that no free slot is lost to a getter: after
// goroutines on every P have used the slab, one goroutine obtains every
// slot, except with PerPCache the ones other Ps may keep (one each).
func TestSlabNoStranding(t *testing.T) { slabModes(t, testSlabNoStranding) }

func testSlabNoStranding(t *testing.T, perP bool) {
	const n = 64
	s := mustSlab(t, 8, n, perP)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if b, err := s.TryGet(); err == nil {
					runtime.Gosched()
					_ = s.Put(b)
				}
			}
		}()
	}
	wg.Wait()
	got := 0
	for {
		if _, err := s.TryGet(); err != nil {
			break
		}
		got++
	}
	want := n
	if perP {
		// A per-P cache may keep one slot from Gets on other Ps.
		want = n - (runtime.GOMAXPROCS(0) - 1)
	}
	if got < want || got > n {
		t.Fatalf("got %d slots, want %d to %d", got, want, n)
	}
}

func TestSlabZeroAllocs(t *testing.T) { slabModes(t, testSlabZeroAllocs) }

func testSlabZeroAllocs(t *testing.T, perP bool) {
	skipUnderRace(t)
	s := mustSlab(t, 4096, 64, perP)
	if a := testing.AllocsPerRun(1000, func() { _ = s.Put(s.Get()) }); a != 0 {
		t.Fatalf("%v allocs, want 0", a)
	}
	if a := testing.AllocsPerRun(100, func() {
		var bs [64][]byte
		for i := range bs {
			bs[i] = s.Get()
		}
		for _, b := range bs {
			_ = s.Put(b)
		}
	}); a != 0 {
		t.Fatalf("all slots out: %v allocs, want 0", a)
	}
}

// TestSlabSlotSizes checks, for awkward slot sizes, that every slot comes
// out once, goes back by address, and that every other start is refused
// (the slot index is computed with a reciprocal multiply, not a division).
func TestSlabSlotSizes(t *testing.T) { slabModes(t, testSlabSlotSizes) }

func testSlabSlotSizes(t *testing.T, perP bool) {
	for _, size := range []int{1, 3, 7, 10, 64, 4096, 65537} {
		s := mustSlab(t, size, 130, perP) // three bitmap words, the last partial
		var got [][]byte
		for {
			b, err := s.TryGet()
			if err != nil {
				break
			}
			got = append(got, b)
		}
		if len(got) != 130 {
			t.Fatalf("size %d: %d slots", size, len(got))
		}
		for _, b := range got {
			if size > 1 {
				if err := s.Put(b[1:]); !errors.Is(err, ErrForeign) {
					t.Fatalf("size %d: Put(b[1:]) = %v", size, err)
				}
			}
			if err := s.Put(b); err != nil {
				t.Fatalf("size %d: %v", size, err)
			}
			if err := s.Put(b); !errors.Is(err, ErrDoublePut) {
				t.Fatalf("size %d: double Put = %v", size, err)
			}
		}
	}
}

// BenchmarkSlabFloor measures what a Get/Put pair of Slab cannot do
// without: one compare-and-swap to take a slot's bit and one to give it
// back (an exact, lock-free double-Put check needs an atomic
// read-modify-write on each side; on amd64 even an atomic store is a
// locked instruction). Compare it with BenchmarkSlab's serial Get/Put.
func BenchmarkSlabFloor(b *testing.B) {
	var w atomic.Uint64
	w.Store(^uint64(0))
	for range b.N {
		old := w.Load()
		w.CompareAndSwap(old, old&(old-1))
		old = w.Load()
		w.CompareAndSwap(old, old|1)
	}
}

func BenchmarkSlab(b *testing.B) {
	s := mustSlab(b, 16, 64)
	b.ReportAllocs()
	for range b.N {
		buf := s.Get()
		buf[0] = 1
		s.Put(buf)
	}
}

// BenchmarkSlabPerP is BenchmarkSlab with per-P caches: one
// compare-and-swap per Get/Put pair, below BenchmarkSlabFloor.
func BenchmarkSlabPerP(b *testing.B) {
	s := mustSlab(b, 16, 64, true)
	b.ReportAllocs()
	for range b.N {
		buf := s.Get()
		buf[0] = 1
		s.Put(buf)
	}
}
