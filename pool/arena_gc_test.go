package pool

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/zeroio/zeroio/internal/percpu"
)

// fifo keeps a window of live buffers, so that every shard fills while one
// of its buffers is still out and is retired, then releases them all.
func fifo(a *Arena, rounds int) {
	var win []Buf
	for i := range rounds {
		win = append(win, a.Make(512))
		if len(win) > 4 {
			_ = win[0].Done()
			win = win[1:]
		}
		if i%2000 == 0 {
			runtime.GC()
		}
	}
	for i := range win {
		_ = win[i].Done()
	}
}

// Shards retired while a buffer was out are let go once their buffers are
// released, with any Retries setting: with 0 they are never queued, with
// more they leave the queue two collections after they were retired.
func TestArenaReleasesRetiredShards(t *testing.T) {
	for _, retries := range []int{0, 1, 4} {
		a := mustArena(t, 4096, retries)
		fifo(a, 20000)
		if !settle(func() bool { return a.Stats().BytesHeld <= 16*4096 }) {
			t.Errorf("Retries %d: BytesHeld %d (%d shards) after every buffer was released and several collections",
				retries, a.Stats().BytesHeld, a.Stats().BytesHeld/4096)
		}
	}
}

// An arena that goes idle after a burst gives the burst's shards back.
func TestArenaIdleReleasesBurst(t *testing.T) {
	a := mustArena(t, 4096, 2)
	burst := make([]Buf, 1000) // 1000 x 512 B live at once: 125 shards
	for i := range burst {
		burst[i] = a.Make(512)
	}
	for i := range burst {
		_ = burst[i].Done()
	}
	if !settle(func() bool { return a.Stats().BytesHeld <= 8*4096 }) {
		t.Fatalf("idle arena still holds %d bytes (%d shards) after several collections", a.Stats().BytesHeld, a.Stats().BytesHeld/4096)
	}
	// A collected arena stops its watch: nothing keeps it alive.
	gone := make(chan struct{})
	runtime.AddCleanup(a, func(ch chan struct{}) { close(ch) }, gone)
	b := a.Make(512)
	_ = b.Done()
	a = nil
	if !settle(func() bool {
		select {
		case <-gone:
			return true
		default:
			return false
		}
	}) {
		t.Fatal("an unreachable arena was never collected")
	}
}

// Makes on a P added after the arena was made (GOMAXPROCS grew) carve from
// a shared shard, not a new shard each.
func TestArenaGrownGOMAXPROCS(t *testing.T) {
	if percpu.RaceEnabled {
		t.Skip("timing-dependent P ids; the race detector slows it")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	a := mustArena(t, 0, 0)
	runtime.GOMAXPROCS(4)
	var overflow atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				id := percpu.Pin()
				percpu.Unpin()
				if id < len(a.locals.all) {
					runtime.Gosched()
					continue
				}
				overflow.Add(1)
				b := a.Make(64)
				_ = b.Done()
			}
		}()
	}
	wg.Wait()
	if st := a.Stats(); overflow.Load() > 0 && st.Misses > 10 {
		t.Fatalf("%d Make(64)/Done pairs on new Ps allocated %d shards", overflow.Load(), st.Misses)
	}
}

// A shard whose epoch would wrap is not recycled, so a handle released
// 2^32 reuses ago can never be taken for a live one.
func TestArenaEpochDoesNotWrap(t *testing.T) {
	a := mustArena(t, 64, 0)
	b := a.Make(32)
	stale := b
	_ = b.Done()
	stale.s.epoch = ^uint32(0) // as if 2^32-1 recycles happened since b
	x := a.Make(32)            // the rest of the shard
	_ = x.Done()
	live := a.Make(32) // the shard is full and empty: wrapping would recycle it to epoch 0
	fill(live.B, 1, 1)
	if live.s == stale.s && live.epoch == 0 {
		t.Fatal("the shard was recycled past its last epoch")
	}
	if err := stale.Done(); err == nil {
		t.Fatal("a stale handle's Done was accepted")
	}
	if !intact(live.B, 1, 1) {
		t.Fatal("live buffer overwritten")
	}
	_ = live.Done()
}
