package pool

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/zeroio/zeroio/internal/percpu"
)

func mustArena(t testing.TB, shard, retries int) *Arena {
	t.Helper()
	a, err := NewArena(ArenaOptions{ShardSize: shard, Retries: retries})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestArenaOptions(t *testing.T) {
	for _, o := range []ArenaOptions{{-1, 0}, {0, -1}, {1<<30 + 1, 0}} {
		if _, err := NewArena(o); err == nil {
			t.Errorf("NewArena(%+v) accepted", o)
		}
	}
}

func TestArenaMake(t *testing.T) {
	a := mustArena(t, 1024, 1)
	var bufs []Buf
	for _, n := range []int{0, 1, 7, 8, 100, 512, 513, 4096} {
		b := a.Make(n)
		if len(b.B) != n || cap(b.B) != n || b.Len() != n {
			t.Fatalf("Make(%d): len %d cap %d", n, len(b.B), cap(b.B))
		}
		fill(b.B, n, 0)
		bufs = append(bufs, b)
	}
	for i, b := range bufs {
		if !intact(b.B, len(b.B), 0) {
			t.Fatalf("buffer %d overwritten by a neighbour", i)
		}
	}
	for i := range bufs {
		if err := bufs[i].Done(); err != nil {
			t.Fatal(err)
		}
	}
	if st := a.Stats(); st.Outstanding != 0 || st.Rejected != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestArenaRecyclesShard(t *testing.T) {
	a := mustArena(t, 256, 1)
	first := a.Make(64)
	p := &first.B[0]
	_ = first.Done()
	for range 100 { // far more than one shard's worth
		b := a.Make(64)
		_ = b.Done()
	}
	if st := a.Stats(); st.Misses > 2 || st.BytesHeld > 2*256 {
		t.Fatalf("sequential make/done should reuse one shard: %+v", st)
	}
	b := a.Make(64)
	_ = p
	_ = b.Done()
}

func TestArenaMisuse(t *testing.T) {
	t.Run("done-twice-same-handle-is-noop", func(t *testing.T) {
		a := mustArena(t, 1024, 1)
		b := a.Make(10)
		if err := b.Done(); err != nil {
			t.Fatal(err)
		}
		if err := b.Done(); err != nil {
			t.Fatalf("second Done on the same handle: %v", err)
		}
		if b.B != nil {
			t.Fatal("B not cleared by Done")
		}
	})
	t.Run("done-through-copy", func(t *testing.T) {
		a := mustArena(t, 1024, 1)
		b := a.Make(10)
		c := b
		if err := b.Done(); err != nil {
			t.Fatal(err)
		}
		if err := c.Done(); !errors.Is(err, ErrDoubleDone) {
			t.Fatalf("Done through a copy: %v, want ErrDoubleDone", err)
		}
		if r := a.Stats().Rejected; r != 1 {
			t.Fatalf("Rejected = %d", r)
		}
	})
	t.Run("copy-cannot-free-a-live-neighbour", func(t *testing.T) {
		// bufpool's Done through a copy decrements the shard's count twice,
		// so the shard restarts under a live buffer. Here it must not.
		a := mustArena(t, 64, 1)
		x := a.Make(8)
		y := a.Make(8)
		fill(y.B, 1, 1)
		xc := x
		_ = x.Done()
		_ = xc.Done() // refused
		for range 20 {
			z := a.Make(8)
			fill(z.B, 2, 2)
			_ = z.Done()
		}
		if !intact(y.B, 1, 1) {
			t.Fatal("a live buffer was handed to another owner")
		}
		_ = y.Done()
	})
	t.Run("stale-after-recycle", func(t *testing.T) {
		a := mustArena(t, 64, 1)
		b := a.Make(32)
		stale := b
		_ = b.Done()
		// Fill the shard again so it restarts with a new epoch, at the same
		// offset.
		n1 := a.Make(32)
		n2 := a.Make(32)
		n3 := a.Make(32) // restart
		if err := stale.Done(); !errors.Is(err, ErrDoubleDone) {
			t.Fatalf("stale Done: %v, want ErrDoubleDone", err)
		}
		for _, n := range []*Buf{&n1, &n2, &n3} {
			if err := n.Done(); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Run("heap-buffers", func(t *testing.T) {
		a := mustArena(t, 64, 1)
		b := a.Make(1000)
		c := b
		if err := b.Done(); err != nil {
			t.Fatal(err)
		}
		if err := c.Done(); err != nil { // nothing to corrupt: a plain allocation
			t.Fatalf("Done through a copy of a plain allocation: %v", err)
		}
		var zero Buf
		if err := zero.Done(); err != nil {
			t.Fatalf("zero Buf: %v", err)
		}
		if st := a.Stats(); st != (Stats{}) {
			t.Fatalf("plain allocations counted: %+v", st)
		}
	})
}

func TestArenaNegativePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Make(-1) did not panic")
		}
	}()
	mustArena(t, 0, 0).Make(-1)
}

func TestArenaHammer(t *testing.T) {
	for _, retries := range []int{0, 2} {
		a := mustArena(t, 512, retries)
		var wg sync.WaitGroup
		for w := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				held := make([]Buf, 0, 4)
				for r := range 300 {
					b := a.Make(1 + (w*7+r)%100)
					fill(b.B, w, r)
					held = append(held, b)
					if r%3 == 0 {
						runtime.Gosched()
					}
					if len(held) == cap(held) || r == 299 {
						for i := range held {
							if !intact(held[i].B, w, r-len(held)+1+i) {
								t.Error("a buffer was shared by two owners")
								return
							}
							if err := held[i].Done(); err != nil {
								t.Error(err)
								return
							}
						}
						held = held[:0]
					}
				}
			}()
		}
		wg.Wait()
		if o := a.Stats().Outstanding; o != 0 {
			t.Fatalf("Outstanding = %d", o)
		}
	}
}

func TestArenaZeroAllocs(t *testing.T) {
	skipUnderRace(t)
	a := mustArena(t, 64<<10, 2)
	b := a.Make(100)
	_ = b.Done()
	if n := testing.AllocsPerRun(10000, func() {
		b := a.Make(100)
		_ = b.Done()
	}); n != 0 {
		t.Fatalf("%v allocs per Make/Done, want 0", n)
	}
}

var benchSink []byte

// BenchmarkArena measures a Make/Done pair served from a shard
// (case=reuse) and one served by a plain allocation (case=overhead, a
// request above half a shard), with make beside each, and the two costs
// below any per-P allocator that detects a double Done (case=floor): one
// procPin/procUnpin pair and one compare-and-swap on each side.
func BenchmarkArena(b *testing.B) {
	const n = 64
	b.Run("case=reuse/impl=make", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			benchSink = make([]byte, n)
		}
	})
	b.Run("case=reuse/impl=arena", func(b *testing.B) {
		a := mustArena(b, 2*n, 1)
		b.ReportAllocs()
		for range b.N {
			x := a.Make(n)
			_ = x.Done()
		}
	})
	b.Run("case=overhead/impl=arena", func(b *testing.B) {
		a := mustArena(b, n, 1)
		b.ReportAllocs()
		for range b.N {
			x := a.Make(n)
			_ = x.Done()
		}
	})
	b.Run("case=floor/impl=pin", func(b *testing.B) {
		for range b.N {
			percpu.Pin()
			percpu.Unpin()
		}
	})
	b.Run("case=floor/impl=cas", func(b *testing.B) {
		var w atomic.Uint64
		for range b.N {
			old := w.Load()
			w.CompareAndSwap(old, old|1)
			old = w.Load()
			w.CompareAndSwap(old, old&^1)
		}
	})
}
