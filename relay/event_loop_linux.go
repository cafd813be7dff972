package relay

import (
	"net/netip"
	"slices"
	"sync/atomic"

	"github.com/zeroio/zeroio/internal/evloop"
	"github.com/zeroio/zeroio/internal/nbsys"
	"github.com/zeroio/zeroio/internal/tlshello"
	"golang.org/x/sys/unix"
)

// A loop is one event loop of the event engine: the listeners it
// watches, the connections it accepted (a slab of evConns, each found
// from an epoll event by its slot and generation), and the mechanism of
// package evloop: an epoll instance (Poller), a timer wheel, an inbox
// through which other goroutines hand it work, and pools of buffers and
// pipes.
//
// Everything but the inbox belongs to the loop's goroutine alone.
// Descriptors are registered edge-triggered for reading and writing once,
// and never modified or deleted: close(2) removes them from the epoll set
// (epoll(7): a descriptor is removed from all epoll sets when its last
// reference closes, and the loops never duplicate sockets).
type loop struct {
	e     *eventEngine
	id    int
	p     evloop.Poller
	now   int64 // monotonic nanoseconds at the last wake-up
	wheel wheel
	stop  bool
	freed bool   // a relay of this loop gave back a slot: look at paused listeners
	seq   uint32 // the last registration's sequence number
	turns uint64 // turns of the loop, for tests

	lns   []*loopListener
	conns []*evConn // the slab; free slots have state stFree
	free  []int32

	// Clients waiting for a slot (evConn.park), in the order they
	// parked; an entry whose client has since ended or moved on is
	// dropped at the next look (retryParked), which comes when a slot
	// frees, or at parkAt.
	parked, parkedSpare []parkedConn
	parkAt              int64

	bufs    evloop.Bufs
	pipes   evloop.Pipes         // for splicing
	targets map[Addr]*targetAddr // see resolve
	hello   tlshello.Info        // scratch for the ClientHello parser

	// The loop's load, which other loops read to choose where a new
	// connection goes (pick): the connections it holds, and those handed
	// to it and not yet taken.
	held, queued atomic.Int32

	// full counts the loop's listeners paused at a limit
	// (loopListener.full) and clients parked waiting for a slot, which a
	// loop that frees a slot looks at to set slotFree and wake the loop
	// (wakePaused).
	full     atomic.Int32
	slotFree atomic.Bool

	// What other goroutines post, and connections they accepted for
	// the loop; closed once the loop has stopped.
	inbox evloop.Inbox[handedConn]
}

// parkedConn is a parked client, as the registration of its socket
// names it: a slot reused by another client has another.
type parkedConn struct {
	c   *evConn
	seq uint32
}

// handedConn is a connection accepted elsewhere for a loop to serve.
type handedConn struct {
	f    *front
	fd   int
	peer netip.AddrPort
	wait bool // see accepted
}

// Epoll data: Fd holds a connection's slot times two plus its side (0
// client, 1 target) and Pad the sequence number of the registration
// (never 0), which the connection keeps for that side; with Pad 0, Fd is
// a listener's index, or evloop.WakeFd for the Poller's own eventfd.

// Pipes: as package splice's, a megabyte (the kernel caps it at
// pipe-max-size), and a few kept idle per loop.
const (
	pipeSize     = 1 << 20
	maxIdlePipes = 16
)

func newLoop(e *eventEngine, id int) (*loop, error) {
	now := mono()
	l := &loop{e: e, id: id, now: now}
	if err := l.p.Open(now); err != nil {
		return nil, err
	}
	l.inbox.Init(&l.p)
	l.wheel.Init(now)
	l.pipes = evloop.Pipes{MaxIdle: maxIdlePipes, Size: pipeSize, Max: e.pipeMax, Open: &e.pipes}
	return l, nil
}

// post queues f to run on the loop.
func (l *loop) post(f func()) { l.inbox.Post(f) }

// pass queues fd, a client of f that another goroutine accepted (and
// took its connWG count for), for l to serve. Until l takes it, it holds
// a descriptor and no slot: it counts in Server.pending.
func (l *loop) pass(f *front, fd int, peer netip.AddrPort, wait bool) {
	l.queued.Add(1)
	l.e.s.pending.Add(1)
	if !l.inbox.Put(handedConn{f, fd, peer, wait}) {
		l.dropHanded(handedConn{f: f, fd: fd})
	}
}

// load is how many connections l serves or is about to.
func (l *loop) load() int32 { return l.held.Load() + l.queued.Load() }

// pick returns the loop that serves a connection l accepted: the loop
// with the fewest connections, l itself unless another has two fewer.
// EPOLLEXCLUSIVE wakes the first of the loops waiting in the order they
// began watching the listener, not the least busy, so a burst of
// connections may all reach one loop; a connection that lasts would then
// keep its loop's CPU busy beside an idle one. HAProxy's threads hand
// accepted connections to the least loaded thread the same way. The
// margin of two keeps the load of connection churn, which moves by one
// now and then, from bouncing connections between loops.
func (l *loop) pick() *loop {
	if o := leastLoaded(l.e.loops); o.load() < l.load()-1 {
		return o
	}
	return l
}

// leastLoaded returns the loop of loops with the fewest connections.
func leastLoaded(loops []*loop) *loop {
	best := loops[0]
	for _, o := range loops[1:] {
		if o.load() < best.load() {
			best = o
		}
	}
	return best
}

// call runs f on the loop and waits for it. Never from a loop.
func (l *loop) call(f func()) {
	done := make(chan struct{})
	l.post(func() { f(); close(done) })
	<-done
}

// serveHanded serves a connection another goroutine handed to l
// (drained from the inbox).
func (l *loop) serveHanded(h handedConn) {
	l.accepted(h.f, h.fd, h.peer, h.wait)
	// Counted out once admitted (or closed), so that atLimit never
	// misses it meanwhile.
	l.queued.Add(-1)
	l.e.s.pending.Add(-1)
}

// exit closes what was handed to l and not served: its loop has stopped.
func (l *loop) exit() {
	for _, h := range l.inbox.Close() {
		l.dropHanded(h)
	}
}

// dropHanded closes a client handed to l that l will not serve.
func (l *loop) dropHanded(h handedConn) {
	nbsys.Close(h.fd)
	l.queued.Add(-1)
	l.e.s.pending.Add(-1)
	h.f.srv.connWG.Done()
}

// run is the loop's goroutine. Each turn waits for events (or the next
// timer, retry or inbox work), serves them, retries what waits for a
// slot or a backoff, fires due timers, and drains the inbox.
func (l *loop) run() {
	defer l.e.wg.Done()
	for !l.stop {
		evs := l.p.Wait(l.timeout(), l.now)
		l.now = mono()
		l.turns++
		for i := range evs {
			l.dispatch(&evs[i])
		}
		l.retry()
		l.wheel.Advance(l.now, l.expire)
		if l.p.Work() {
			l.inbox.Drain(l.serveHanded)
		}
	}
	l.exit()
	l.abortAll(errShutdown)
	l.pipes.Close()
	l.p.Close()
}

// timeout returns how long the loop may wait, in milliseconds (-1: until
// an event): until the next timer, a listener's retry or the parked
// clients' next look; not at all when a listener has more to accept or
// a slot was freed after this turn's look.
func (l *loop) timeout() int {
	timeout := l.wheel.Timeout(l.now)
	until := func(at int64) {
		ms := int((at - l.now + 999_999) / 1_000_000)
		if timeout < 0 || ms < timeout {
			timeout = max(ms, 0)
		}
	}
	for _, ll := range l.lns {
		if ll == nil {
			continue
		}
		if ll.more {
			timeout = 0
		} else if ll.retryAt != 0 {
			until(ll.retryAt)
		}
	}
	if len(l.parked) > 0 {
		until(l.parkAt)
	}
	if l.freed { // by a timer or the inbox, after this turn's look
		timeout = 0
	}
	return timeout
}

// dispatch serves one epoll event: a connection's, the Poller's wake-up,
// or a listener's.
func (l *loop) dispatch(ev *unix.EpollEvent) {
	switch {
	case ev.Pad != 0:
		l.connEvent(ev)
	case ev.Fd == evloop.WakeFd:
		l.p.Woken()
	default:
		if int(ev.Fd) < len(l.lns) {
			if ll := l.lns[ev.Fd]; ll != nil {
				l.acceptAll(ll)
			}
		}
	}
}

// retry looks again at what waits for room after a turn's events: the
// parked clients and the paused listeners, when a slot was freed (here,
// or by another loop) or their retry time came, and the listeners that
// stopped at their accept batch.
func (l *loop) retry() {
	freed := l.freed
	l.freed = false
	if freed {
		l.wakePaused()
	} else if l.slotFree.Load() {
		freed = l.slotFree.Swap(false)
	}
	if len(l.parked) > 0 && (freed || l.now >= l.parkAt) {
		l.retryParked()
	}
	for _, ll := range l.lns {
		if ll != nil && (ll.more || (ll.retryAt != 0 && (l.now >= ll.retryAt || freed && ll.full))) {
			ll.retryAt = 0
			l.acceptAll(ll)
		}
	}
}

// retryParked has the clients parked in l look for a slot again, in the
// order they parked, but for those behind one of the same route that
// found none. It looks at most once per turn with a slot freed, however
// many clients wait.
func (l *loop) retryParked() {
	ps := l.parked
	l.parked, l.parkedSpare = l.parkedSpare[:0], nil
	l.parkAt = l.now + pauseRetry
	var fullBuf [4]*route
	full := fullBuf[:0]
	for i, p := range ps {
		ps[i] = parkedConn{}
		c := p.c
		if c.cseq != p.seq || c.state != stSlot || c.want == nil {
			continue // ended, or taken
		}
		if rt := c.want; slices.Contains(full, rt) {
			l.parked = append(l.parked, p)
		} else if c.takeOrPark(rt, true); c.state == stSlot && c.want == rt {
			full = append(full, rt)
		}
	}
	if l.parkedSpare == nil {
		l.parkedSpare = ps[:0]
	}
}

// wakePaused tells the other loops with a listener paused at a limit,
// or clients parked, that l freed a slot, and wakes them to look again.
func (l *loop) wakePaused() {
	for _, o := range l.e.loops {
		if o != l && o.full.Load() > 0 && !o.slotFree.Load() {
			o.slotFree.Store(true)
			o.p.Notify()
		}
	}
}

// abortAll ends every connection of the loop.
func (l *loop) abortAll(why error) {
	for _, c := range l.conns {
		if c.state != stFree {
			c.finish(why)
		}
	}
}

// newConn takes a free slot of the slab.
func (l *loop) newConn() *evConn {
	if n := len(l.free); n > 0 {
		c := l.conns[l.free[n-1]]
		l.free = l.free[:n-1]
		l.held.Add(1)
		c.id = l.e.s.newStreamID()
		return c
	}
	c := &evConn{lp: l, idx: int32(len(l.conns)), cfd: -1, tfd: -1}
	l.conns = append(l.conns, c)
	l.held.Add(1)
	c.id = l.e.s.newStreamID()
	return c
}

// freeConn gives c's slot back. Its sequence numbers are cleared, so
// events still queued for it are ignored.
func (l *loop) freeConn(c *evConn) {
	c.cseq, c.tseq = 0, 0
	c.state = stFree
	l.free = append(l.free, c.idx)
	l.held.Add(-1)
}

func (l *loop) connEvent(ev *unix.EpollEvent) {
	i := int(ev.Fd >> 1)
	if i >= len(l.conns) {
		return
	}
	c := l.conns[i]
	// The clock is read again for each connection's event, not once per
	// wake-up: bytes moved here stamp c.last with it, and a loop that was
	// descheduled after waking would otherwise stamp them with a time
	// from before the stall and close an active connection early for
	// idleness by the stall's length.
	l.now = mono()
	target := ev.Fd&1 == 1
	seq := c.cseq
	if target {
		seq = c.tseq
	}
	if seq != uint32(ev.Pad) || c.state == stFree {
		return
	}
	c.event(target, ev.Events)
}

// register adds fd, side of c, to the epoll set.
func (l *loop) register(c *evConn, fd int, target bool) unix.Errno {
	if l.seq++; l.seq == 0 {
		l.seq = 1
	}
	side := int32(0)
	if target {
		side = 1
		c.tseq = l.seq
	} else {
		c.cseq = l.seq
	}
	ev := unix.EpollEvent{
		Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET,
		Fd:     c.idx<<1 | side,
		Pad:    int32(l.seq),
	}
	return l.p.Add(fd, &ev)
}
