package relay

import (
	"time"

	"github.com/zeroio/zeroio/internal/nbsys"
	"github.com/zeroio/zeroio/internal/sockaddr"
	"golang.org/x/sys/unix"
)

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
	if err := l.p.Add(el.fd, &ev); err != 0 {
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
			l.p.Del(ll.fd)
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
		if rt, room := ll.f.room(); !room {
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
				if _, room := ll.f.room(); room {
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
			to.pass(ll.f, fd, sockaddr.Parse(&raw), true)
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
