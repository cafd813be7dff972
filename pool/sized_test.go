package pool

import (
	"runtime"
	"testing"
)

func TestSizedClasses(t *testing.T) {
	p := NewSized(SizedOptions{})
	for _, tc := range []struct{ n, cap int }{
		{0, 64}, {1, 64}, {64, 64}, {65, 128}, {1000, 1024}, {4096, 4096},
		{4097, 8192}, {65536, 65536}, {65537, 131072}, {1 << 20, 1 << 20},
		{1<<20 + 1, 1<<20 + 1}, // above the maximum: exact, not pooled
	} {
		b := p.Get(tc.n)
		if len(b) != tc.n || cap(b) != tc.cap {
			t.Errorf("Get(%d): len %d cap %d, want len %d cap %d", tc.n, len(b), cap(b), tc.n, tc.cap)
		}
		p.Put(b)
	}
	if got := NewSized(SizedOptions{MaxSize: 5000}).MaxSize(); got != 8192 {
		t.Errorf("MaxSize 5000 rounds to %d, want 8192", got)
	}
}

func TestSizedReuse(t *testing.T) {
	p := NewSized(SizedOptions{})
	b := p.Get(100)
	b[0] = 42
	p.Put(b)
	c := p.Get(128)
	// The same P's cache hands the buffer back (we may have migrated, so
	// only check when it is the same memory).
	if &c[:1][0] == &b[:1][0] && cap(c) != 128 {
		t.Fatalf("reused buffer has cap %d", cap(c))
	}
	p.Put(c)
	st := p.Stats()
	if st.Hits+st.Misses != 2 || st.Outstanding != 0 {
		t.Fatalf("stats after 2 gets and 2 puts: %+v", st)
	}
}

func TestSizedNegativePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Get(-1) did not panic")
		}
	}()
	NewSized(SizedOptions{}).Get(-1)
}

func TestSizedBadMaxSize(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("MaxSize above 1 GiB did not panic")
		}
	}()
	NewSized(SizedOptions{MaxSize: 1<<30 + 1})
}

// TestSizedMisuse covers every case of the misuse contract.
func TestSizedMisuse(t *testing.T) {
	t.Run("double-put-is-rejected", func(t *testing.T) {
		p := NewSized(SizedOptions{})
		b := p.Get(1000)
		p.Put(b)
		p.Put(b)
		if r := p.Stats().Rejected; r != 1 {
			t.Fatalf("Rejected = %d, want 1", r)
		}
		x, y := p.Get(1000), p.Get(1000)
		if &x[:1][0] == &y[:1][0] {
			t.Fatal("double Put handed one buffer to two owners")
		}
	})
	t.Run("double-put-through-shared-pool-is-rejected", func(t *testing.T) {
		p := NewSized(SizedOptions{})
		a, b := p.Get(1000), p.Get(1000) // second goes past the per-P slot
		p.Put(a)
		p.Put(b)
		p.Put(b)
		p.Put(a)
		if r := p.Stats().Rejected; r != 2 {
			t.Fatalf("Rejected = %d, want 2", r)
		}
	})
	t.Run("non-class-capacity-is-rejected", func(t *testing.T) {
		p := NewSized(SizedOptions{})
		p.Put(make([]byte, 100))   // not a power of two
		p.Put(make([]byte, 32))    // under 64
		p.Put(p.Get(4096)[:0:100]) // capacity shrunk by reslicing
		p.Put(nil)
		if r := p.Stats().Rejected; r != 4 {
			t.Fatalf("Rejected = %d, want 4", r)
		}
	})
	t.Run("reslice-from-middle-is-rejected", func(t *testing.T) {
		p := NewSized(SizedOptions{})
		b := p.Get(4096)
		p.Put(b[1024:])    // capacity 3072: not a class
		p.Put(b[8:72:72])  // capacity 64 is a class, but the start is not aligned to it
		p.Put(b[100:][:0]) // capacity 3996: not a class
		if r := p.Stats().Rejected; r != 3 {
			t.Fatalf("Rejected = %d, want 3", r)
		}
		p.Put(b)
	})
	t.Run("above-max-is-dropped", func(t *testing.T) {
		p := NewSized(SizedOptions{MaxSize: 4096})
		big := p.Get(1 << 20)
		if cap(big) != 1<<20 {
			t.Fatalf("cap %d", cap(big))
		}
		p.Put(big)
		st := p.Stats()
		if st.Dropped != 1 || st.BytesHeld != 0 {
			t.Fatalf("stats %+v: want 1 dropped and nothing held", st)
		}
	})
	t.Run("foreign-class-buffer-is-adopted", func(t *testing.T) {
		p := NewSized(SizedOptions{})
		f := make([]byte, 256)
		p.Put(f)
		if r := p.Stats().Rejected; r != 0 {
			t.Fatalf("Rejected = %d", r)
		}
		g := p.Get(200)
		if cap(g) != 256 {
			t.Fatalf("cap %d", cap(g))
		}
	})
	t.Run("marker-cannot-be-forged-by-content", func(t *testing.T) {
		p := NewSized(SizedOptions{})
		b := p.Get(64)
		for i := range b {
			b[i] = 0xff
		}
		p.Put(b) // arbitrary content is accepted
		if r := p.Stats().Rejected; r != 0 {
			t.Fatalf("Rejected = %d", r)
		}
	})
}

func TestSizedHammer(t *testing.T) {
	p := NewSized(SizedOptions{})
	sizes := []int{1, 64, 100, 4096, 5000, 65536, 70000, 1 << 20}
	hammer(t, 64, 300, func(r int) []byte { return p.Get(sizes[r%len(sizes)]) }, p.Put)
	if o := p.Stats().Outstanding; o != 0 {
		t.Fatalf("Outstanding = %d after every buffer was returned", o)
	}
}

func TestSizedPackageLevel(t *testing.T) {
	b := Get(300)
	if len(b) != 300 || cap(b) != 512 {
		t.Fatalf("len %d cap %d", len(b), cap(b))
	}
	Put(b)
	if Default().Stats().Hits+Default().Stats().Misses == 0 {
		t.Fatal("default pool counted nothing")
	}
}

func TestSizedZeroAllocs(t *testing.T) {
	skipUnderRace(t)
	p := NewSized(SizedOptions{})
	for _, n := range []int{64, 512, 4096, 16384, 65536, 1 << 20} {
		p.Put(p.Get(n))
		if a := testing.AllocsPerRun(1000, func() { p.Put(p.Get(n)) }); a != 0 {
			t.Errorf("Get/Put(%d): %v allocs, want 0", n, a)
		}
	}
	// Two buffers at once goes through the shared level too.
	if a := testing.AllocsPerRun(1000, func() {
		x, y := p.Get(4096), p.Get(4096)
		p.Put(x)
		p.Put(y)
	}); a != 0 {
		t.Errorf("two outstanding: %v allocs, want 0", a)
	}
}

// TestSizedReleasesAfterGC checks that memory held by idle buffers goes back
// after the program stops using them and the collector runs, except the
// bounded per-P cache (one buffer per class up to 64 KiB per P).
func TestSizedReleasesAfterGC(t *testing.T) {
	p := NewSized(SizedOptions{})
	var bufs [][]byte
	for range 200 {
		bufs = append(bufs, p.Get(64<<10), p.Get(1<<20))
	}
	if h := p.Stats().BytesHeld; h < 200*(64<<10+1<<20) {
		t.Fatalf("BytesHeld %d after allocating 200 pairs", h)
	}
	for _, b := range bufs {
		p.Put(b)
	}
	bufs = nil
	perP := int64(128<<10) * int64(runtime.GOMAXPROCS(0)+1)
	if !settle(func() bool { return p.Stats().BytesHeld <= perP }) {
		t.Fatalf("BytesHeld %d after GC, want <= %d", p.Stats().BytesHeld, perP)
	}
}

// TestSizedKeepsNothingAboveMax checks outlier protection: huge buffers
// are neither pooled nor counted as held.
func TestSizedKeepsNothingAboveMax(t *testing.T) {
	p := NewSized(SizedOptions{})
	for range 10 {
		p.Put(p.Get(100 << 20))
	}
	if st := p.Stats(); st.BytesHeld != 0 || st.Dropped != 10 {
		t.Fatalf("stats %+v", st)
	}
}

// A pool that is no longer reachable is collected, even while buffers it
// allocated are in use or cached: their cleanups do not keep it alive.
func TestPoolsAreCollected(t *testing.T) {
	gone := make(chan string, 3)
	func() {
		p := NewSized(SizedOptions{})
		keep := p.Get(4096)
		p.Put(p.Get(64)) // one in a per-P cache
		runtime.AddCleanup(p, func(ch chan string) { ch <- "Sized" }, gone)
		a := mustArena(t, 4096, 1)
		b := a.Make(100) // the arena's current shard stays in it
		runtime.AddCleanup(a, func(ch chan string) { ch <- "Arena" }, gone)
		s := mustSlab(t, 64, 8)
		_ = s.Get()
		runtime.AddCleanup(s, func(ch chan string) { ch <- "Slab" }, gone)
		sinkBufs = append(sinkBufs, keep, b.B)
	}()
	seen := map[string]bool{}
	settle(func() bool {
		for {
			select {
			case n := <-gone:
				seen[n] = true
			default:
				return len(seen) == 3
			}
		}
	})
	if len(seen) != 3 {
		t.Fatalf("collected: %v; want Sized, Arena and Slab", seen)
	}
	sinkBufs = nil
}

// sinkBufs keeps buffers reachable after their pool is not.
var sinkBufs [][]byte
