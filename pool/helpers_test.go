package pool

import (
	"encoding/binary"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/zeroio/zeroio/internal/percpu"
)

// window is how many bytes fill writes at each end of a buffer: any two
// buffers that overlap at all share their head or tail windows, and the
// race detector need not instrument a megabyte per round.
const window = 256

// fill writes a pattern unique to (owner, round) over the head and tail of b.
func fill(b []byte, owner, round int) {
	var w [8]byte
	binary.LittleEndian.PutUint64(w[:], uint64(owner)<<32|uint64(round))
	for _, i := range ends(len(b)) {
		b[i] = w[i%8] ^ byte(i)
	}
}

// intact reports whether b still holds the pattern fill wrote.
func intact(b []byte, owner, round int) bool {
	var w [8]byte
	binary.LittleEndian.PutUint64(w[:], uint64(owner)<<32|uint64(round))
	for _, i := range ends(len(b)) {
		if b[i] != w[i%8]^byte(i) {
			return false
		}
	}
	return true
}

func ends(n int) []int {
	var is []int
	for i := 0; i < n && i < window; i++ {
		is = append(is, i)
	}
	for i := max(window, n-window); i < n; i++ {
		is = append(is, i)
	}
	return is
}

// hammer runs workers goroutines, each doing rounds of get, fill, yield,
// check, put. Two owners of one buffer would overwrite each other's pattern
// (and, under -race, be reported).
func hammer(t *testing.T, workers, rounds int, get func(round int) []byte, put func([]byte)) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan string, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				b := get(r)
				fill(b, w, r)
				if r%3 == 0 {
					runtime.Gosched()
				}
				if !intact(b, w, r) {
					errs <- "a buffer was shared by two owners"
					return
				}
				put(b)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

func skipUnderRace(t *testing.T) {
	if percpu.RaceEnabled {
		t.Skip("allocation counts are not meaningful under -race (sync.Pool drops items on purpose)")
	}
}

// settle runs the garbage collector until f holds or a few seconds pass.
func settle(f func() bool) bool {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(5 * time.Millisecond) // let cleanups run
		if f() {
			return true
		}
	}
	return false
}

// slabHeld is the memory a slab of n slots of size bytes holds: the slots,
// a cache line of bitmap per 64 slots and, with per-P caches, a 4-byte
// owner word per slot.
func slabHeld(size, n int, perP bool) int64 {
	h := int64(size*n) + int64((n+63)/64*percpu.CacheLine)
	if perP {
		h += 4 * int64(n)
	}
	return h
}
