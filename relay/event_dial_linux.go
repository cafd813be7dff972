package relay

import (
	"github.com/zeroio/zeroio/internal/nbsys"
	"github.com/zeroio/zeroio/internal/sockaddr"
	"golang.org/x/sys/unix"
)

// The event engine's dial: a connection's attempts at its route's
// targets, each a non-blocking connect(2) under the connection's timer.

// dialNext dials the next target of c's dialPlan, as dialTarget does for
// the goroutine engine, under a timer for the time the plan gives it;
// with none left, no target answered.
func (c *evConn) dialNext() {
	l := c.lp
	b, end := c.plan.next(l.now)
	if b == nil {
		c.noneAnswered()
		return
	}
	if end != 0 {
		l.wheel.arm(c, end, l.now)
	} else {
		l.wheel.disarm(c)
	}
	c.b = b
	c.ai = 0
	c.state = stResolve
	sa, err, pending := l.resolve(b.addr, c)
	switch {
	case pending:
	case err != nil:
		c.attemptFailed(err)
	default:
		c.connectTo(sa)
	}
}

// connectTo starts a non-blocking connect to sa, the address of c.b.
// The attempt's timer runs.
func (c *evConn) connectTo(sa *sockaddr.Addr) {
	if r := c.lp.targets[c.b.addr]; c.tm.At() != 0 && r != nil {
		// The attempt's time is shared with the name's addresses left.
		if n := len(r.more) - int(c.ai); n > 0 {
			now := c.lp.now
			c.lp.wheel.arm(c, addrShare(now, c.tm.At(), n), now)
		}
	}
	fd, e := nbsys.StreamSocket(sa.Family)
	if e != 0 {
		if exhausted(e) {
			c.waitFD(sa, e)
			return
		}
		c.attemptFailed(e)
		return
	}
	c.tfd = fd
	if sa.Family != unix.AF_UNIX {
		setSocketOptions(fd, c.cfg, true)
		if c.up.end > c.up.off || c.cfg.SendProxy != 0 {
			// Bytes wait for the target (the client's, or the PROXY
			// header): with quick ACKs off (tcp(7) TCP_QUICKACK), the
			// last ACK of the handshake leaves with the first of them,
			// written as soon as the connect completes, instead of in
			// a segment of its own (tcp_rcv_synsent_state_process in
			// net/ipv4/tcp_input.c; HAProxy's tcp-smart-connect).
			nbsys.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_QUICKACK, 0)
		}
	}
	switch e = nbsys.Connect(fd, sa); e {
	case 0, unix.EINPROGRESS:
	default:
		c.attemptFailed(e)
		return
	}
	// Check for a dial to the relay itself now, not once connected: by
	// then the loop may have accepted the connection and dialled again.
	c.sa = sa
	if c.selfDial() {
		c.attemptFailed(errLoop)
		return
	}
	if re := c.lp.register(c, fd, true); re != 0 {
		c.attemptFailed(re)
		return
	}
	c.state = stDialing
	if e == 0 { // a Unix socket connects at once
		c.tW = true
		c.connected()
	}
}

// waitFD waits for a descriptor to dial sa with, as the goroutine
// engine's dialOne does: out of descriptors or memory is no fault of the
// target, which is not marked down. It tries again as dialPlan.waitFD
// says, and when the dial's time is up ends the client.
func (c *evConn) waitFD(sa *sockaddr.Addr, e unix.Errno) {
	l := c.lp
	wait, ok := c.plan.waitFD(l.now)
	if !ok {
		c.rt.srv.log.Debug("no descriptor to dial with", "route", c.rt.name, "target", c.b.name, "err", e)
		c.plan.abandon()
		c.b = nil
		c.noneAnswered()
		return
	}
	c.sa, c.state = sa, stNoFD
	l.wheel.arm(c, l.now+wait, l.now)
}

// attemptFailed closes the socket of a failed or timed-out dial, marks
// its target down, and tries the next.
func (c *evConn) attemptFailed(err error) {
	if c.tfd >= 0 {
		nbsys.Close(c.tfd)
		c.tfd, c.tseq = -1, 0
	}
	c.tR, c.tW, c.tHup = false, false, false
	if sa := c.nextAddr(err); sa != nil {
		c.connectTo(sa)
		return
	}
	c.plan.failed(err)
	c.b = nil
	c.dialNext()
}

// nextAddr returns the next address of the target's name to connect to
// after a connect to one failed, re-arming the attempt's timer; nil when
// the name has no other address left, or the dial no time.
func (c *evConn) nextAddr(err error) *sockaddr.Addr {
	l := c.lp
	r := l.targets[c.b.addr]
	if err == errLoop || r == nil || r.pending || int(c.ai) >= len(r.more) {
		return nil
	}
	if !c.plan.timeLeft(l.now) {
		return nil
	}
	if end := c.plan.share(l.now); end != 0 {
		l.wheel.arm(c, end, l.now)
	}
	sa := &r.more[c.ai]
	c.ai++
	return sa
}

// noneAnswered ends a connection that no target answered.
func (c *evConn) noneAnswered() {
	c.noTarget()
	c.finish(errQuiet)
}

// selfDial reports whether the target socket reached one of the relay's
// own listeners (Server.dialsSelf): the common case, a port no listener
// has, needs no system call.
func (c *evConn) selfDial() bool {
	remote, s := c.sa.AddrPort(), c.rt.srv
	return s.mayDialSelf(remote) && s.selfDialed(nbsys.LocalAddr(c.tfd), remote)
}

// connected starts the relay once the target accepted: the PROXY header
// and whatever the client sent meanwhile go out at once.
func (c *evConn) connected() {
	l := c.lp
	c.relayTo(c.plan.connected())
	c.state = stRelay
	c.last = l.now
	c.startPacing(l.now)
	c.armRelay()
	if c.cfg.SendProxy != 0 {
		c.queueProxyHeader()
	}
	c.debug("relaying")
	c.pumpAll()
}
