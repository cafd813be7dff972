package percpu

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"
)

type slot struct {
	plain uint64 // written only while pinned, read only while pinned
	n     uint64 // counter read concurrently with Load
	_     [CacheLine - 16]byte
}

// TestPinnedState checks that per-P state touched only while pinned adds up
// exactly under heavy concurrency; under -race, that the Acquire/Release
// hand-over makes plain per-P accesses race-free.
func TestPinnedState(t *testing.T) {
	slots := make([]slot, Procs())
	var overflow atomic.Uint64
	const workers, each = 32, 5000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	go func() { // a concurrent reader, as Stats would be
		for {
			select {
			case <-stop:
				return
			default:
			}
			for i := range slots {
				_ = Load(&slots[i].n)
			}
			runtime.Gosched()
		}
	}()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := Pin()
				if id < len(slots) {
					s := &slots[id]
					Acquire(unsafe.Pointer(s))
					s.plain++
					Inc(&s.n)
					Release(unsafe.Pointer(s))
					Unpin()
				} else {
					Unpin()
					overflow.Add(1)
				}
				if i%97 == 0 {
					runtime.Gosched()
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	var sum, plain uint64
	for i := range slots {
		sum += Load(&slots[i].n)
		plain += slots[i].plain
	}
	if sum+overflow.Load() != workers*each || plain != sum {
		t.Fatalf("counted %d (+%d overflow), plain %d, want %d", sum, overflow.Load(), plain, workers*each)
	}
}
