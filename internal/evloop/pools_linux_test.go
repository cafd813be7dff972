package evloop

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/zeroio/zeroio/internal/nbsys"
)

// TestPipesBounds: at most MaxIdle empty pipes are kept, a pipe given
// back with bytes in it is closed rather than reused, no pipe is opened
// past Max, and Open counts every pipe open, idle or held.
func TestPipesBounds(t *testing.T) {
	var open atomic.Int64
	room := 3
	ps := Pipes{MaxIdle: 2, Size: 1 << 16, Open: &open, Max: func() int64 { return int64(room) }}
	defer ps.Close()
	var held []Pipe
	for range room {
		p, e := ps.Get()
		if e != 0 {
			t.Fatal(e)
		}
		held = append(held, p)
	}
	if _, e := ps.Get(); e == 0 {
		t.Fatal("a pipe opened past Max")
	}
	if open.Load() != 3 || ps.Held != 3 || ps.Taken != 3 {
		t.Fatalf("open %d held %d taken %d, want 3 3 3", open.Load(), ps.Held, ps.Taken)
	}
	// One with a byte in it is closed; two empty ones are kept.
	nbsys.Write(held[0].W, []byte("x"))
	ps.Put(held[0], 1)
	ps.Put(held[1], 0)
	ps.Put(held[2], 0)
	if open.Load() != 2 || ps.Held != 0 || len(ps.idle) != 2 {
		t.Fatalf("open %d held %d idle %d, want 2 0 2", open.Load(), ps.Held, len(ps.idle))
	}
	p, e := ps.Get()
	if e != 0 {
		t.Fatal(e)
	}
	if n, e := nbsys.Read(p.R, make([]byte, 1)); e == 0 {
		t.Fatalf("a reused pipe held %d bytes", n)
	}
	q, _ := ps.Get()
	r, _ := ps.Get() // a new one: room for a third
	ps.Put(p, 0)
	ps.Put(q, 0)
	ps.Put(r, 0) // past MaxIdle: closed
	if open.Load() != 2 || len(ps.idle) != 2 || ps.Taken != 6 {
		t.Fatalf("open %d idle %d taken %d, want 2 2 6", open.Load(), len(ps.idle), ps.Taken)
	}
	ps.Close()
	if open.Load() != 0 {
		t.Fatalf("%d pipes open after Close", open.Load())
	}
}

// TestBufs counts the buffers held.
func TestBufs(t *testing.T) {
	var b Bufs
	x, y := b.Get(16<<10), b.Get(100)
	if len(x) != 16<<10 || len(y) != 100 || b.Held != 2 {
		t.Fatalf("lengths %d %d, held %d", len(x), len(y), b.Held)
	}
	b.Put(x)
	b.Put(y)
	if b.Held != 0 {
		t.Fatalf("held %d after giving both back", b.Held)
	}
}

// TestPipesSharedMax: loops whose pools share Open never hold more than
// Max pipes between them, however their Gets interleave.
func TestPipesSharedMax(t *testing.T) {
	var open, peak atomic.Int64
	const max, loops, rounds = 4, 8, 200
	var wg sync.WaitGroup
	for range loops {
		wg.Go(func() {
			ps := Pipes{MaxIdle: 0, Size: 1 << 16, Open: &open, Max: func() int64 { return max }}
			for range rounds {
				p, e := ps.Get()
				if e != 0 {
					continue
				}
				for n := open.Load(); n > peak.Load(); n = open.Load() {
					peak.CompareAndSwap(peak.Load(), n)
				}
				ps.Put(p, 0)
			}
		})
	}
	wg.Wait()
	if peak.Load() > max || open.Load() != 0 {
		t.Fatalf("peak %d pipes open (max %d), %d left open", peak.Load(), max, open.Load())
	}
}
