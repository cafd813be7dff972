package relay

import (
	"time"

	"github.com/zeroio/zeroio/internal/evloop"
	"github.com/zeroio/zeroio/internal/nbsys"
	"github.com/zeroio/zeroio/internal/sockaddr"
	"golang.org/x/sys/unix"
)

// The event engine's dial: a connection's attempts at its route's
// targets, each a non-blocking connect(2) under the connection's timer.

// dialNext dials the next target the route's policy picks, as dialTarget
// does for the goroutine engine: each attempt may take the time left
// divided by the targets left to try, and a failed one marks its target
// down and moves on, until one connects or none is left (then lastErr
// ends the connection).
func (c *evConn) dialNext(lastErr error) {
	l := c.lp
	var b *backend
	if c.left > 0 && (c.deadline == 0 || c.deadline > l.now) {
		b = c.ts.pick(c.src.Addr(), &c.tried)
	}
	if b == nil {
		c.noTarget(lastErr)
		return
	}
	if c.deadline != 0 {
		l.wheel.arm(c, l.now+(c.deadline-l.now)/int64(c.left), l.now)
	} else {
		l.wheel.disarm(c)
	}
	c.left--
	c.b = b
	b.dialing.Add(1) // until connected, attemptFailed or finish
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
		// The attempt's time is shared with the name's addresses left,
		// as package net's dialer shares it (partialDeadline), so that
		// one that leaves a connect unanswered leaves time to the others.
		if n := len(r.more) - int(c.ai); n > 0 {
			now := c.lp.now
			c.lp.wheel.arm(c, now+(c.tm.At()-now)/int64(n+1), now)
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
		c.b.loops.Store(true)
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
// target, which is not marked down. It tries again after 5 ms, doubling
// to 100 ms, as long as the dial's deadline allows, and then ends the
// client.
func (c *evConn) waitFD(sa *sockaddr.Addr, e unix.Errno) {
	l := c.lp
	c.fdWait = min(max(2*c.fdWait, int64(5*time.Millisecond)), int64(100*time.Millisecond))
	if c.deadline != 0 && l.now+c.fdWait > c.deadline {
		c.rt.srv.log.Debug("no descriptor to dial with", "route", c.rt.name, "target", c.b.addr.String(), "err", e)
		c.noTarget(e)
		return
	}
	c.sa, c.state = sa, stNoFD
	l.wheel.arm(c, l.now+c.fdWait, l.now)
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
	c.b.dialing.Add(-1)
	c.b.dialFailed(err)
	c.rt.srv.log.Debug("dial failed; trying another target", "route", c.rt.name, "target", c.b.addr.String(), "err", err)
	c.b = nil
	c.dialNext(err)
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
	if c.deadline != 0 {
		if c.deadline <= l.now {
			return nil
		}
		l.wheel.arm(c, l.now+(c.deadline-l.now)/int64(c.left+1), l.now)
	}
	sa := &r.more[c.ai]
	c.ai++
	return sa
}

// noTarget ends a connection that no target answered.
func (c *evConn) noTarget(err error) {
	rt := c.rt
	rt.st.errDial.Add(1)
	c.endWhy = endNoTarget
	c.finish(errQuiet)
}

// selfDial reports whether the target socket reached one of the relay's
// own listeners (Server.dialsSelf): the common case, a port no listener
// has, needs no system call.
func (c *evConn) selfDial() bool {
	remote := c.sa.AddrPort()
	if !remote.IsValid() {
		return false
	}
	ports := c.rt.srv.ports.Load()
	if ports == nil {
		return false
	}
	hit := false
	for _, l := range *ports {
		if l.Port() == remote.Port() {
			hit = true
		}
	}
	if !hit {
		return false
	}
	local := nbsys.LocalAddr(c.tfd)
	if local.Addr() != remote.Addr() {
		return false
	}
	for _, l := range *ports {
		if l.Port() == remote.Port() && (l.Addr().IsUnspecified() || l.Addr() == remote.Addr()) {
			return true
		}
	}
	return false
}

// connected starts the relay once the target accepted: the PROXY header
// and whatever the client sent meanwhile go out at once.
func (c *evConn) connected() {
	l := c.lp
	c.b.dialOK()
	c.b.connStart()
	c.b.dialing.Add(-1)
	c.state = stRelay
	c.last = l.now
	if idle := c.cfg.IdleTimeout; idle > 0 {
		l.wheel.arm(c, evloop.After(l.now, idle), l.now)
	} else {
		l.wheel.disarm(c)
	}
	if c.cfg.SendProxy != 0 {
		c.queueProxyHeader()
	}
	c.debug("relaying")
	c.pumpAll()
}
