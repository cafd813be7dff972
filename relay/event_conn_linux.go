package relay

import (
	"errors"
	"net/netip"

	"github.com/zeroio/zeroio/internal/evloop"
	"github.com/zeroio/zeroio/internal/nbsys"
	"github.com/zeroio/zeroio/internal/sockaddr"
	"github.com/zeroio/zeroio/internal/tlshello"
	"golang.org/x/sys/unix"
)

// Connection states.
const (
	stFree    uint8 = iota // the slot is free
	stProxy                // reading the client's PROXY header
	stResolve              // waiting for the target's name to resolve
	stDialing              // connect(2) in progress
	stRelay                // moving bytes
	stHello                // reading the ClientHello that chooses the route
	stSlot                 // waiting for a slot under its route's limits
	stNoFD                 // waiting for a descriptor to dial with (waitFD)
)

// evConn is one relayed connection of the event engine: its two sockets,
// a direction each way, and its timer. It lives in its loop's slab and is
// touched only by that loop.
type evConn struct {
	stream
	lp  *loop
	idx int32
	// cseq and tseq are the registrations of the client and target
	// sockets (see loop.register): events of an earlier connection in the
	// slot, or of an earlier dial attempt, carry others. cseq also names
	// the connection (connRef).
	cseq, tseq uint32
	state      uint8
	// Readiness of each socket as edge-triggered epoll reported it,
	// cleared when a call would block.
	cR, cW, tR, tW bool
	// The peer's end (EPOLLRDHUP) or an error was reported: a short read
	// no longer means that the socket is drained (see pump).
	cHup, tHup bool

	want     *route // the route whose slot it waits for (stSlot)
	table    *routeTable
	cfd, tfd int

	up, down dir // client to target, target to client
	tm       evloop.Timer
	last     int64 // the loop's time when a byte last moved

	// The dial: its plan, and the attempt under way (stream.b its
	// target).
	plan dialPlan
	sa   *sockaddr.Addr // the address dialled
	ai   uint8          // the next of the target name's other addresses to try

	hdr [maxProxyHeader]byte // room for an outgoing PROXY header
}

// accepted starts serving fd, a client of f (the caller took its connWG
// count): at once under the only route of a front that needs no hello,
// else once its ClientHello, read here in the loop, chooses the route.
func (l *loop) accepted(f *front, fd int, peer netip.AddrPort, wait bool) {
	t := f.table.Load()
	if !t.needsHello() {
		l.admit(t.only(), fd, peer, wait)
		return
	}
	c := l.newConn()
	r := t.routes[0].cfg.Load() // the front's settings
	c.front, c.table, c.cfg, c.cfd, c.src, c.start = f, t, r, fd, peer, l.now
	c.state = stHello
	// The hello's wait holds a server slot, which its route takes over
	// (take). acceptAll found room before accepting; if another loop
	// took it meanwhile, the client is let in over the limit rather
	// than reset: by at most one per loop, as the goroutine engine's
	// accept loops pausing after their accept, and by the clients a
	// reload handed over from a listener it closed.
	c.peekSlot = true
	if !f.srv.admitPeek() {
		if !wait {
			c.peekSlot = false
			c.finish(errQuiet)
			return
		}
		f.srv.active.Add(1)
	}
	if e := l.register(c, fd, false); e != 0 {
		f.acceptFailed()
		c.finish(errQuiet)
		return
	}
	c.awaitHello(r)
}

// awaitHello has c, a front's client, wait for its PROXY header, if the
// front (r its settings) takes one, or else for its hello, under their
// timeouts. It reports false when the client may not send a header: c
// is finished.
func (c *evConn) awaitHello(r *Route) bool {
	l := c.lp
	if c.needsProxy() {
		if !c.proxyPeer() {
			c.finish(errQuiet)
			return false
		}
		c.state = stProxy
		l.wheel.arm(c, evloop.After(l.now, r.ProxyHeaderTimeout), l.now)
		return true
	}
	l.wheel.arm(c, evloop.After(l.now, r.PeekTimeout), l.now)
	return true
}

// helloBufSize holds a PROXY header, the longest ClientHello the parser
// takes and room for an outgoing PROXY header.
const helloBufSize = 2*bufSize + tlshello.DefaultMaxLen

// readHello reads the client's first bytes until tlshello.Parse answers,
// then lets the front's table choose the route. The bytes stay in the up
// direction's buffer, for the target. The buffer is taken when bytes
// arrive and given back while none wait in it, so that a client that
// connects and sends nothing holds none while it waits.
func (c *evConn) readHello() {
	d, l := &c.up, c.lp
	for {
		if d.end > d.off {
			if err := tlshello.Parse(d.buf[d.off:d.end], &l.hello); err != tlshello.ErrNeedMore {
				c.helloRead(err)
				return
			}
		}
		if !c.cR {
			return
		}
		if d.buf == nil {
			d.buf = l.getBufN(helloBufSize)
		}
		space := d.buf[d.end : len(d.buf)-proxyReserve]
		if len(space) == 0 {
			c.helloRead(tlshello.ErrTooLarge)
			return
		}
		n, e := nbsys.Read(c.cfd, space)
		switch {
		case e == unix.EAGAIN:
			c.cR = false
			if d.end == d.off { // nothing after a PROXY header, if any
				l.putBuf(d.buf)
				d.buf, d.off, d.end = nil, 0, 0
			}
			return
		case e == unix.EINTR:
			continue
		case e != 0 || n == 0:
			why := helloClosed
			if d.end > d.off {
				why = helloMalformed // ended inside a hello
			}
			c.helloFailed(why, nil)
			c.finish(errQuiet)
			return
		}
		d.end += n
	}
}

// helloRead takes what Parse said of the hello to the route
// (stream.chose), and admits the client there: its limits, then policy
// and the dial.
func (c *evConn) helloRead(err error) {
	rt := c.chose(c.table, &c.lp.hello, err)
	if rt == nil {
		c.finish(errQuiet)
		return
	}
	c.takeOrPark(rt, true)
}

// admit starts relaying fd, a client of rt accepted by l (or handed
// over), whose connWG count the caller took.
func (l *loop) admit(rt *route, fd int, peer netip.AddrPort, wait bool) {
	rt.st.accepted.Add(1)
	c := l.newConn()
	c.cfg, c.cfd, c.src, c.start = rt.cfg.Load(), fd, peer, l.now
	c.state = stSlot
	if e := l.register(c, fd, false); e != 0 {
		rt.st.errAccept.Add(1)
		c.finish(errQuiet)
		return
	}
	c.takeOrPark(rt, wait)
}

// takeOrPark admits c under rt's limits (stream.take) or, with wait,
// parks it until a slot frees (or rt stops), as the goroutine engine's
// waitTake waits.
func (c *evConn) takeOrPark(rt *route, wait bool) {
	c.unpark()
	if c.take(rt) {
		c.admitted()
		return
	}
	select {
	case <-rt.done:
		wait = false
	default:
	}
	if !wait {
		rt.st.overLimit.Add(1)
		c.finish(errQuiet)
		return
	}
	c.park(rt)
}

// park makes c, a client accepted over a limit (another loop took the
// slot between the check and the accept, or a hello chose a full route),
// wait for a slot of rt: its loop has it look again when a slot frees
// (retryParked), with no timer of its own. Parked clients count against
// the limits (atLimit), so that the loops accept no new client while
// they wait: a new client would take the slot that frees, and a parked
// one could wait behind new clients for ever.
func (c *evConn) park(rt *route) {
	l := c.lp
	l.wheel.disarm(c)
	c.want, c.state = rt, stSlot
	rt.parked.Add(1)
	if !c.peekSlot { // a client holding a server slot does not wait for one
		rt.srv.pending.Add(1)
	}
	if len(l.parked) == 0 {
		l.parkAt = l.now + pauseRetry
	}
	l.parked = append(l.parked, parkedConn{c, c.cseq})
	l.full.Add(1)
}

// unpark ends c's wait for a slot, if it waits.
func (c *evConn) unpark() {
	rt := c.want
	if rt == nil {
		return
	}
	c.want = nil
	rt.parked.Add(-1)
	if !c.peekSlot {
		rt.srv.pending.Add(-1)
	}
	c.lp.full.Add(-1)
}

// admitted starts serving c under the route that gave it a slot: the
// PROXY header (unless the front read it already), then policy and the
// dial.
func (c *evConn) admitted() {
	l, r := c.lp, c.cfg
	c.want = nil
	if r.Listen.Network != "unix" {
		setSocketOptions(c.cfd, r, false)
	}
	if c.needsProxy() {
		if !c.proxyPeer() {
			c.finish(errQuiet)
			return
		}
		c.state = stProxy
		l.wheel.arm(c, evloop.After(l.now, r.ProxyHeaderTimeout), l.now)
		if c.cR {
			c.readProxy()
		}
		return
	}
	l.wheel.disarm(c)
	c.policy()
}

// policy applies the access lists and the per-client limit to the client
// (the PROXY header's, if any), then dials.
func (c *evConn) policy() {
	if !c.admitClient() {
		c.finish(errQuiet)
		return
	}
	l := c.lp
	c.plan.start(c.rt, c.cfg, c.src.Addr(), l.now)
	if e := c.up.readAhead(l, c.cfd, &c.cR, c.cHup); e != 0 {
		// The client reset before the dial: no target is dialled for
		// it. It counts as a copy error, not as a relay (none reached
		// a target), and is logged as ended by a reset, with no
		// target.
		c.endWhy = endReset
		c.finish(e)
		return
	}
	c.dialNext()
}

// event handles an epoll event on one of c's sockets.
func (c *evConn) event(target bool, ev uint32) {
	in := ev&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0
	out := ev&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0
	hup := ev&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0
	if target {
		c.tR, c.tW, c.tHup = c.tR || in, c.tW || out, c.tHup || hup
		if c.state == stDialing {
			if ev&(unix.EPOLLERR|unix.EPOLLHUP) != 0 {
				e := nbsys.SoError(c.tfd)
				if e == 0 {
					e = unix.ECONNREFUSED
				}
				c.attemptFailed(e)
				return
			}
			if ev&unix.EPOLLOUT != 0 {
				c.connected()
			}
			return
		}
	} else {
		c.cR, c.cW, c.cHup = c.cR || in, c.cW || out, c.cHup || hup
		if ev&unix.EPOLLERR != 0 && (c.state == stResolve || c.state == stDialing || c.state == stNoFD) {
			// The client reset while its target is being dialled:
			// nothing can reach it any more. The dial stops now, not
			// at its timeout, giving back the client's slots; the
			// target, not at fault, is not marked down.
			if e := nbsys.SoError(c.cfd); e != 0 {
				c.endWhy = endReset
				c.finish(e)
			}
			return
		}
	}
	switch c.state {
	case stProxy:
		if c.cR {
			c.readProxy()
		}
	case stHello:
		c.readHello()
	case stRelay:
		c.pumpAll()
		if ev&unix.EPOLLERR != 0 && c.state == stRelay {
			c.failed(target)
		}
	}
}

// failed ends a relaying connection whose side (target or client)
// reported an error, the peer's reset, that the pump did not come to:
// it reads a side only while the other takes its bytes, so a client
// that resets while its target is not reading would otherwise hold the
// target until the idle timeout. HAProxy's streams end on such an error
// too, whatever they were waiting for.
func (c *evConn) failed(target bool) {
	fd := c.cfd
	if target {
		fd = c.tfd
	}
	if e := nbsys.SoError(fd); e != 0 {
		c.finish(e)
	}
}

// expired runs when c's timer fires: the PROXY header, the dial, or
// relaying (relayTimer).
func (c *evConn) expired() {
	l := c.lp
	switch c.state {
	case stProxy:
		c.proxyError(errProxyTimeout)
	case stHello:
		c.helloFailed(helloTimeout, nil)
		c.finish(errQuiet)
	case stResolve, stDialing:
		c.attemptFailed(unix.ETIMEDOUT)
	case stNoFD:
		if end := c.plan.share(l.now); end != 0 {
			l.wheel.arm(c, end, l.now)
		}
		c.connectTo(c.sa)
	case stRelay:
		c.relayTimer()
	}
}

var errProxyTimeout = errors.New("PROXY header not received in time")

// finish closes c's sockets and gives back everything it held; why says
// how the relay ended (stream.end).
func (c *evConn) finish(why error) {
	l := c.lp
	srv := l.e.s
	l.wheel.disarm(c)
	c.unpark()
	if c.cfd >= 0 {
		nbsys.Close(c.cfd)
	}
	if c.tfd >= 0 {
		nbsys.Close(c.tfd)
	}
	c.up.release(l)
	c.down.release(l)
	c.plan.abandon() // a dial in progress, if any
	c.end(why, l.now)
	if c.release() {
		l.freed = true
	}
	*c = evConn{lp: l, idx: c.idx, cfd: -1, tfd: -1}
	l.freeConn(c)
	srv.connWG.Done()
}
