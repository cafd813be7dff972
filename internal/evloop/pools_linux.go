package evloop

import (
	"sync/atomic"

	"github.com/zeroio/zeroio/internal/nbsys"
	"github.com/zeroio/zeroio/pool"
	"golang.org/x/sys/unix"
)

// Bufs hands a loop's relays byte buffers from package pool, counting
// those held (for tests and stats: a relay holds a buffer only while
// bytes wait in it).
type Bufs struct {
	Held int64 // buffers taken and not given back
}

// Get returns a buffer of n bytes.
func (b *Bufs) Get(n int) []byte {
	b.Held++
	return pool.Get(n)
}

// Put gives back a buffer from Get; p must not be used after.
func (b *Bufs) Put(p []byte) {
	b.Held--
	pool.Put(p)
}

// A Pipe is a pipe for splice(2): bytes written to W are read from R.
// Both ends are non-blocking and close-on-exec.
type Pipe struct{ R, W int }

// Pipes is a loop's pool of pipes for splicing, as Go's internal/poll
// keeps for its splice: idle pipes are kept up to MaxIdle; a new one is
// opened with F_SETPIPE_SZ Size while fewer than Max are open. Pipes are
// counted in Open, which several loops may share to bound the pipes of all
// of them.
//
// Invariant: a pipe in the pool is empty; one that may hold bytes (of a
// relay that ended) is closed, never reused, so they cannot reach the
// next relay.
type Pipes struct {
	MaxIdle int
	Size    int
	// Max returns the most pipes Open may count; negative: no bound;
	// nil: none. It is called only when no idle pipe is left.
	Max  func() int64
	Open *atomic.Int64 // pipes open, idle or held; may be shared

	idle  []Pipe
	Held  int64 // pipes taken and not given back
	Taken int64 // pipes taken ever
}

// Get returns an idle pipe, or a new one if Max allows; EMFILE
// otherwise, as when the process is out of descriptors, and the caller
// copies instead. A new pipe is counted in Open before it is made, so
// loops sharing Open cannot together pass Max.
func (ps *Pipes) Get() (Pipe, unix.Errno) {
	if n := len(ps.idle); n > 0 {
		p := ps.idle[n-1]
		ps.idle = ps.idle[:n-1]
		ps.Taken++
		ps.Held++
		return p, 0
	}
	n := ps.Open.Add(1)
	if ps.Max != nil {
		if m := ps.Max(); m >= 0 && n > m {
			ps.Open.Add(-1)
			return Pipe{}, unix.EMFILE
		}
	}
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		ps.Open.Add(-1)
		return Pipe{}, err.(unix.Errno)
	}
	// F_SETPIPE_SZ fails past pipe-max-size or the user's pipe quota
	// (fcntl(2)); the pipe then keeps the size it has.
	unix.FcntlInt(uintptr(fds[0]), unix.F_SETPIPE_SZ, ps.Size)
	ps.Taken++
	ps.Held++
	return Pipe{fds[0], fds[1]}, 0
}

// Put gives back p from Get, holding n bytes: kept for reuse if it is
// empty and the pool has room, closed otherwise.
func (ps *Pipes) Put(p Pipe, n int) {
	ps.Held--
	if n != 0 || len(ps.idle) >= ps.MaxIdle {
		ps.close(p)
		return
	}
	ps.idle = append(ps.idle, p)
}

// Adopt counts p, a pipe received from another process (a hand-over),
// as taken from ps: Put gives it back.
func (ps *Pipes) Adopt() {
	ps.Open.Add(1)
	ps.Taken++
	ps.Held++
}

// Close closes the idle pipes. The loop calls it when it stops.
func (ps *Pipes) Close() {
	for _, p := range ps.idle {
		ps.close(p)
	}
	ps.idle = nil
}

func (ps *Pipes) close(p Pipe) {
	nbsys.Close(p.R)
	nbsys.Close(p.W)
	ps.Open.Add(-1)
}
