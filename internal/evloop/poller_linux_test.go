package evloop

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zeroio/zeroio/internal/nbsys"
	"golang.org/x/sys/unix"
)

// openPoller opens a Poller closed at the test's end.
func openPoller(t *testing.T) *Poller {
	t.Helper()
	p := new(Poller)
	if err := p.Open(mono()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func mono() int64 { return time.Since(t0).Nanoseconds() }

var t0 = time.Now()

// TestPollerEvents: a descriptor added reports its readiness with the
// data it was added with, a Wait with nothing ready returns none after
// its timeout, and one deleted reports nothing more.
func TestPollerEvents(t *testing.T) {
	p := openPoller(t)
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer nbsys.Close(fds[0])
	defer nbsys.Close(fds[1])
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: 7, Pad: 9}
	if e := p.Add(fds[0], &ev); e != 0 {
		t.Fatal(e)
	}
	if evs := p.Wait(20, mono()); len(evs) != 0 {
		t.Fatalf("%d events from an empty pipe", len(evs))
	}
	nbsys.Write(fds[1], []byte("x"))
	evs := p.Wait(5000, mono())
	if len(evs) != 1 || evs[0].Fd != 7 || evs[0].Pad != 9 || evs[0].Events&unix.EPOLLIN == 0 {
		t.Fatalf("events %+v, want one EPOLLIN with Fd 7 Pad 9", evs)
	}
	if e := p.Del(fds[0]); e != 0 {
		t.Fatal(e)
	}
	nbsys.Write(fds[1], []byte("y"))
	if evs := p.Wait(0, mono()); len(evs) != 0 {
		t.Fatalf("%d events after Del", len(evs))
	}
}

// TestPollerNotify: Notify from another goroutine ends a Wait that would
// sleep forever, with the wake-up event or with Work set before it
// slept, and Work then reports it once.
func TestPollerNotify(t *testing.T) {
	p := openPoller(t)
	for range 200 {
		go p.Notify()
		for !p.Work() {
			for _, ev := range p.Wait(-1, mono()) {
				if ev.Fd != WakeFd || ev.Pad != 0 {
					t.Fatalf("event %+v, want the wake-up", ev)
				}
				p.Woken()
			}
		}
		if p.Work() {
			t.Fatal("Work reported twice for one Notify")
		}
	}
}

// TestProcs: ReserveProcs raises GOMAXPROCS by the loops it grants, one
// per P the program had, and ReleaseProcs lowers it back; a Poller may
// hold its P only while GOMAXPROCS exceeds what all loops hold.
func TestProcs(t *testing.T) {
	p0 := runtime.GOMAXPROCS(0)
	n := ReserveProcs()
	if n != p0 || runtime.GOMAXPROCS(0) != 2*p0 {
		t.Fatalf("reserved %d, GOMAXPROCS %d; want %d, %d", n, runtime.GOMAXPROCS(0), p0, 2*p0)
	}
	p := openPoller(t)
	if !p.CheckHold(mono()) {
		t.Error("a loop may not hold its P with GOMAXPROCS above the loops' Ps")
	}
	prev := runtime.GOMAXPROCS(1)
	hold := p.CheckHold(mono())
	runtime.GOMAXPROCS(prev)
	if hold {
		t.Error("a loop may hold its P with GOMAXPROCS 1")
	}
	ReleaseProcs(n)
	if got := runtime.GOMAXPROCS(0); got != p0 {
		t.Fatalf("GOMAXPROCS %d after release, want %d", got, p0)
	}
}

// TestInbox: many goroutines post functions and put items while the
// loop drains; each runs or is served exactly once, on the loop, each
// goroutine's in the order it queued them; after Close, Put refuses and
// Close returns what was never served.
func TestInbox(t *testing.T) {
	p := openPoller(t)
	var b Inbox[[2]int]
	b.Init(p)
	const senders, each = 16, 500
	var wg sync.WaitGroup
	var onLoop atomic.Bool // set while the loop drains: nothing runs elsewhere
	funcs := make([]int, senders)
	items := make([]int, senders)
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				b.Post(func() {
					if !onLoop.Load() || funcs[g] != i {
						t.Errorf("sender %d: func %d ran off the loop or out of order (next %d)", g, i, funcs[g])
					}
					funcs[g]++
				})
				if !b.Put([2]int{g, i}) {
					t.Error("Put refused before Close")
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	serve := func(x [2]int) {
		if items[x[0]] != x[1] {
			t.Errorf("sender %d: item %d served, want %d", x[0], x[1], items[x[0]])
		}
		items[x[0]]++
	}
	for finished := false; ; {
		select {
		case <-done:
			finished = true
		default:
		}
		if p.Work() {
			onLoop.Store(true)
			b.Drain(serve)
			onLoop.Store(false)
		} else if finished {
			break
		}
		for _, ev := range p.Wait(10, mono()) {
			if ev.Fd == WakeFd {
				p.Woken()
			}
		}
	}
	for g := range senders {
		if funcs[g] != each || items[g] != each {
			t.Fatalf("sender %d: %d funcs ran, %d items served; want %d", g, funcs[g], items[g], each)
		}
	}
	b.Put([2]int{-1, 0})
	if left := b.Close(); len(left) != 1 || left[0][0] != -1 {
		t.Fatalf("Close returned %v, want the one item not served", left)
	}
	if b.Put([2]int{-2, 0}) {
		t.Fatal("Put accepted after Close")
	}
}
