package relay

import (
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/zeroio/zeroio/internal/nbsys"
	"github.com/zeroio/zeroio/internal/sockaddr"
	"github.com/zeroio/zeroio/internal/tlshello"
	"golang.org/x/sys/unix"
)

// A loop is one event loop of the event engine: an epoll instance, the
// listeners it watches, the connections it accepted (a slab of evConns,
// each found from an epoll event by its slot and generation), a timer
// wheel, and an inbox through which other goroutines hand it work.
//
// Everything but the inbox belongs to the loop's goroutine alone.
// Descriptors are registered edge-triggered for reading and writing once,
// and never modified or deleted: close(2) removes them from the epoll set
// (epoll(7): a descriptor is removed from all epoll sets when its last
// reference closes, and the loops never duplicate sockets).
type loop struct {
	e      *eventEngine
	id     int
	epfd   int
	evfd   int // eventfd(2) that wakes the loop for its inbox
	events [128]unix.EpollEvent
	now    int64 // monotonic nanoseconds at the last wake-up
	// Whether the loop may wait holding its P (mayHold), as of holdChecked.
	canHold     bool
	holdChecked int64
	wheel       wheel
	stop        bool
	freed       bool   // a relay of this loop gave back a slot: look at paused listeners
	seq         uint32 // the last registration's sequence number
	turns       uint64 // turns of the loop, for tests

	lns   []*loopListener
	conns []*evConn // the slab; free slots have state stFree
	free  []int32

	// Clients waiting for a slot (evConn.park), in the order they
	// parked; an entry whose client has since ended or moved on is
	// dropped at the next look (retryParked), which comes when a slot
	// frees, or at parkAt.
	parked, parkedSpare []parkedConn
	parkAt              int64

	pipes []pipe // idle pipes for splicing
	// What the loop's relays hold now, and pipes taken ever, for tests.
	bufsHeld, pipesHeld, pipesTaken int64
	targets                         map[Addr]*targetAddr // see resolve
	hello                           tlshello.Info        // scratch for the ClientHello parser

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

	// Waking the loop for its inbox: work is set once something is
	// queued; asleep while the loop waits, or is about to, in
	// epoll_wait; kicked while an eventfd write is unread. A loop that is
	// busy finds work without an eventfd write (see notify).
	work, asleep, kicked atomic.Bool

	mu          sync.Mutex
	inbox       []func()
	spare       []func()     // the inbox's other buffer, swapped in to drain
	handed      []handedConn // connections other goroutines accepted for the loop
	handedSpare []handedConn
	exited      bool // the loop has stopped: close what is handed to it
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

// loopListener is a listener as one loop watches it.
type loopListener struct {
	l       *evListener
	f       *front
	fd      int
	retryAt int64   // after an accept error or a pause: when to try again
	bo      backoff // paces accept errors, and logs them by episode
	more    bool    // accept stopped at its batch bound
	paused  *route  // accepting paused at a limit (the route, or the front's)
	pauseAt int64   // when the pause began, on mono
	full    bool    // accepting paused at a limit, waiting for a slot to free
}

// Epoll data: Fd holds a connection's slot times two plus its side (0
// client, 1 target) and Pad the sequence number of the registration
// (never 0), which the connection keeps for that side; with Pad 0, Fd is
// a listener's index, or -1 for the eventfd.
const evWake = -1

func newLoop(e *eventEngine, id int) (*loop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	evfd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(epfd)
		return nil, os.NewSyscallError("eventfd", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: evWake}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, evfd, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(evfd)
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	now := mono()
	l := &loop{e: e, id: id, epfd: epfd, evfd: evfd, now: now, holdChecked: now - holdCheck}
	l.wheel.init(l.now)
	return l, nil
}

// post queues f to run on the loop.
func (l *loop) post(f func()) {
	l.mu.Lock()
	l.inbox = append(l.inbox, f)
	l.mu.Unlock()
	l.notify()
}

// notify tells the loop that its inbox has work. The loop looks at work
// after every turn, and sets asleep before it waits and then looks at
// work once more, so an eventfd write is needed only when notify finds
// it asleep: one of the two sees the other's store (sync/atomic's
// operations are sequentially consistent).
func (l *loop) notify() {
	l.work.Store(true)
	if l.asleep.Load() && l.kicked.CompareAndSwap(false, true) {
		one := uint64(1)
		unix.Write(l.evfd, (*[8]byte)(unsafe.Pointer(&one))[:])
	}
}

// handOver queues fd, a client of f that another goroutine accepted (and
// took its connWG count for), for l to serve.
func (l *loop) handOver(f *front, fd int, peer netip.AddrPort, wait bool) {
	l.queued.Add(1)
	l.mu.Lock()
	if l.exited {
		l.mu.Unlock()
		l.dropHanded(handedConn{f: f, fd: fd})
		return
	}
	l.handed = append(l.handed, handedConn{f, fd, peer, wait})
	l.mu.Unlock()
	l.notify()
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

// drainInbox runs what other goroutines posted and serves the
// connections they handed over.
func (l *loop) drainInbox() {
	l.mu.Lock()
	fs, hs := l.inbox, l.handed
	l.inbox, l.spare = l.spare[:0], nil
	l.handed, l.handedSpare = l.handedSpare[:0], nil
	l.mu.Unlock()
	for i, h := range hs {
		l.accepted(h.f, h.fd, h.peer, h.wait)
		// Counted out once admitted (or closed), so that atLimit
		// never misses it meanwhile.
		l.queued.Add(-1)
		hs[i] = handedConn{}
	}
	for i, f := range fs {
		f()
		fs[i] = nil
	}
	l.mu.Lock()
	if l.spare == nil {
		l.spare = fs[:0]
	}
	if l.handedSpare == nil {
		l.handedSpare = hs[:0]
	}
	l.mu.Unlock()
}

// exit closes what was handed to l and not served: its loop has stopped.
func (l *loop) exit() {
	l.mu.Lock()
	l.exited = true
	hs := l.handed
	l.handed = nil
	l.mu.Unlock()
	for _, h := range hs {
		l.dropHanded(h)
	}
}

// dropHanded closes a client handed to l that l will not serve.
func (l *loop) dropHanded(h handedConn) {
	nbsys.Close(h.fd)
	l.queued.Add(-1)
	h.f.srv.connWG.Done()
}

// run is the loop's goroutine.
func (l *loop) run() {
	defer l.e.wg.Done()
	for !l.stop {
		timeout := l.wheel.timeout(l.now)
		for _, ll := range l.lns {
			if ll == nil {
				continue
			}
			if ll.more {
				timeout = 0
			} else if ll.retryAt != 0 {
				ms := int((ll.retryAt - l.now + 999_999) / 1_000_000)
				if timeout < 0 || ms < timeout {
					timeout = max(ms, 0)
				}
			}
		}
		if len(l.parked) > 0 {
			ms := int((l.parkAt - l.now + 999_999) / 1_000_000)
			if timeout < 0 || ms < timeout {
				timeout = max(ms, 0)
			}
		}
		if l.freed { // by a timer or the inbox, after this turn's look
			timeout = 0
		}
		if timeout != 0 {
			l.asleep.Store(true)
			if l.work.Load() {
				timeout = 0
			}
		}
		n := l.wait(timeout)
		l.asleep.Store(false)
		l.now = mono()
		l.turns++
		for i := 0; i < n; i++ {
			ev := &l.events[i]
			switch {
			case ev.Pad != 0:
				l.connEvent(ev)
			case ev.Fd == evWake:
				var b [8]byte
				unix.Read(l.evfd, b[:])
				l.kicked.Store(false)
			default:
				if int(ev.Fd) < len(l.lns) {
					if ll := l.lns[ev.Fd]; ll != nil {
						l.acceptAll(ll)
					}
				}
			}
		}
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
		l.wheel.advance(l.now, l.expire)
		if l.work.Swap(false) {
			l.drainInbox()
		}
	}
	l.exit()
	l.abortAll(errShutdown)
	for _, p := range l.pipes {
		l.closePipe(p)
	}
	unix.Close(l.epfd)
	unix.Close(l.evfd)
}

// addListener starts watching l for f. EPOLLEXCLUSIVE (Linux 4.5) wakes
// one of the loops waiting, not all of them, for a new connection.
func (l *loop) addListener(el *evListener, f *front) {
	el.mu.Lock()
	defer el.mu.Unlock()
	if el.closing {
		return
	}
	i := len(l.lns)
	for j, ll := range l.lns {
		if ll == nil {
			i = j
			break
		}
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET | unix.EPOLLEXCLUSIVE, Fd: int32(i)}
	if err := epollCtl(l.epfd, unix.EPOLL_CTL_ADD, el.fd, &ev); err != 0 {
		l.e.s.log.Error("event loop cannot watch a listener", "listen", el.addr.String(), "err", err)
		return
	}
	ll := &loopListener{l: el, f: f, fd: el.fd, more: true, bo: backoff{listen: el.addr.String()}} // connections may wait already
	if i == len(l.lns) {
		l.lns = append(l.lns, ll)
	} else {
		l.lns[i] = ll
	}
}

func (l *loop) removeListener(el *evListener) {
	for i, ll := range l.lns {
		if ll != nil && ll.l == el {
			l.resume(ll)
			epollCtl(l.epfd, unix.EPOLL_CTL_DEL, ll.fd, &unix.EpollEvent{})
			l.lns[i] = nil
		}
	}
}

// acceptBatch is how many connections a loop accepts per turn: one. The
// loop comes back for the next on its following turn (more), after the
// events it has; meanwhile each new connection's wake-up goes to a loop
// that waits in epoll_wait (EPOLLEXCLUSIVE wakes a waiting loop, not a
// busy one), so the accepting spreads over the loops that have time for
// it, and a loop's relays never wait behind a burst of accepts. Which
// loop then serves a connection is pick's choice.
const acceptBatch = 1

// pauseRetry is how often a loop paused at a limit, or with clients
// parked, looks again if no slot frees. A relay that ends makes its loop
// look at once, and wake the other loops paused (wakePaused), so that a
// paused loop sleeps rather than polling; this catches room that comes
// otherwise, as from a reload that raises a limit.
const pauseRetry = 1000 * int64(time.Millisecond)

// acceptAll accepts on ll until EAGAIN or the batch bound. At a limit
// (the server's, or the route's when the front has one) it stops, and
// clients wait in the listen backlog until a slot frees, as the
// goroutine engine's waitRoom does.
func (l *loop) acceptAll(ll *loopListener) {
	ll.more = false
	s := l.e.s
	var raw unix.RawSockaddrAny
	for range acceptBatch {
		var rt *route
		if t := ll.f.table.Load(); !t.needsHello() {
			rt = t.only()
		}
		if s.atLimit(rt) {
			if ll.paused == nil && rt != nil {
				rt.pausing()
				ll.paused, ll.pauseAt = rt, l.now
				rt.st.pauses.begin(ll.pauseAt)
			}
			ll.retryAt = l.now + pauseRetry
			if !ll.full {
				// Loops that free a slot wake l from now on; one
				// freed before is seen by looking again.
				ll.full = true
				l.full.Add(1)
				if !s.atLimit(rt) {
					ll.retryAt = l.now
				}
			}
			return
		}
		l.resume(ll)
		fd, e := nbsys.Accept4(ll.fd, &raw)
		switch e {
		case 0:
		case unix.EAGAIN:
			return
		case unix.EINTR, unix.ECONNABORTED:
			continue
		default:
			// Out of descriptors (EMFILE, ENFILE) or memory: every
			// retry fails the same way until a connection closes, so
			// back off; the connection waits in the queue meanwhile.
			ll.f.acceptFailed()
			ll.retryAt = l.now + int64(ll.bo.failed(s.log, e))
			return
		}
		ll.bo.ok(s.log)
		s.connWG.Add(1)
		if to := l.pick(); to != l {
			to.handOver(ll.f, fd, sockaddr.Parse(&raw), true)
		} else {
			l.accepted(ll.f, fd, sockaddr.Parse(&raw), true)
		}
	}
	ll.more = true
}

// resume ends ll's pause, if any, counting its time.
func (l *loop) resume(ll *loopListener) {
	if ll.full {
		ll.full = false
		l.full.Add(-1)
	}
	if rt := ll.paused; rt != nil {
		rt.st.pauses.end(ll.pauseAt)
		ll.paused = nil
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
		} else if c.take(rt, true); c.state == stSlot && c.want == rt {
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
			o.notify()
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
		return c
	}
	c := &evConn{lp: l, idx: int32(len(l.conns)), cfd: -1, tfd: -1}
	l.conns = append(l.conns, c)
	l.held.Add(1)
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
	return epollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &ev)
}

// expire runs when c's timer fires.
func (l *loop) expire(c *evConn) { c.expired() }
