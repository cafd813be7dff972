package relay

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zeroio/zeroio/internal/proxyproto"
	"github.com/zeroio/zeroio/pool"
	"github.com/zeroio/zeroio/udp"
)

// replyBatch is the most replies a session reads before sending them on,
// and replyBuf the pooled buffer they are read into, one after another:
// each read(2) is given 65,535 bytes, so no reply is ever truncated, and
// 128 KiB holds a full batch of replies up to about 2 KiB (larger ones end
// a batch early).
const (
	replyBatch = 32
	replyBuf   = 128 << 10
)

// sessionKey identifies a session: the client's address, and on a socket
// bound to a wildcard address the local address the client sent to (zero
// otherwise). A client may reach the route at several of the host's
// addresses from one socket, and each flow's replies must leave from the
// address it used, so each is a session of its own.
type sessionKey struct {
	client netip.AddrPort
	local  netip.Addr
	origin netip.AddrPort // on an accept_proxy route, the client its PROXY header names
}

// session is one client's flow. Its goroutine reads the target's replies;
// the route's readers forward the client's datagrams to up.
type session struct {
	u     *udpRoute
	ln    atomic.Pointer[udp.Conn] // the listening socket replies leave from
	peer  atomic.Pointer[peer]     // changed under u.mu when a QUIC client moves
	b     *backend                 // the session's target
	up    *udp.Conn
	rc    syscall.RawConn
	reply replyState   // the Linux read callback's state; session goroutine only
	last  atomic.Int64 // unix nanoseconds of the last datagram either way
	quic  *quicSession // nil unless the client opened with a QUIC Initial
	limit *udpPace     // nil unless the route has a rate or a MaxDuration
}

// session returns the client's session, marked used at now, creating it if
// there is room and the access lists admit the client. nil means the n
// datagrams it was looked up for are dropped; session counts them.
func (u *udpRoute) session(r *Route, ln *udp.Conn, a *arrival, now int64, n uint64) *session {
	key := a.key()
	u.mu.Lock()
	s, drop := u.lookup(a, r, now)
	if s == nil {
		s = u.follow(a, now)
	}
	u.mu.Unlock()
	if s != nil {
		return s
	}
	if drop != nil {
		u.dropped(drop, n, r)
		return nil
	}
	st := &u.rt.st
	client := a.who()
	if !allowed(r.Allow, r.Deny, client.Addr()) {
		st.denied.Add(n)
		return nil
	}
	if !u.rt.withinRate(r, client, &st.udpRateLimited, n) {
		return nil
	}
	ts := u.rt.targets()
	pinned, cid := serverFor(r.QUICLB, ts, a.payload)
	b, up, rc := u.upstream(r, ts, pinned, client, now, n)
	if up == nil {
		return nil
	}
	// Looked up again: with several workers another reader may have taken
	// the last slot, or opened this very session, while we dialled.
	u.mu.Lock()
	other, drop := u.lookup(a, r, now)
	if other == nil && drop == nil {
		s = &session{u: u, b: b, up: up, rc: rc, limit: newUDPPace(r, now)}
		p := a.peer
		if r.SendProxy == 2 {
			p.proxy = proxyproto.AppendV2(nil, proxyproto.Datagram, client, dest(ln, &a.peer))
		}
		s.peer.Store(&p)
		s.ln.Store(ln)
		s.last.Store(now)
		u.sessions[key] = s
		if pinned < 0 || b != ts.bs[pinned] {
			cid = nil
		}
		u.openedQUIC(s, a.payload, cid)
	}
	u.mu.Unlock()
	if s == nil {
		up.Close()
		if drop != nil {
			u.dropped(drop, n, r)
		}
		return other
	}
	// A session is its target's connection: least-conn balances over
	// sessions, and the target's counters show them.
	b.connStart()
	st.udpSessions.Add(1)
	st.udpSessionsTotal.Add(1)
	u.rt.srv.log.Debug("UDP session", "route", u.rt.name, "client", client)
	u.rt.srv.serveWG.Add(1)
	go s.run(r.SessionTimeout)
	if s.limit != nil && s.limit.q != nil {
		u.rt.srv.serveWG.Add(1)
		go s.sendQueued()
	}
	return s
}

// upstream chooses a new session's target, for as long as it lives (a
// client's flow stays on one target), and opens its socket there; ts is
// the route's target set and pinned the index of the target a QUIC
// client's connection ID names (-1 for none), tried first (see QUICLB).
// A target without an address (its name does not resolve, or a reload
// just dropped it) gives way to the next, and so does one whose address
// the session's socket cannot connect to, marked down. So does one that
// is the relay itself under another name: it is marked down and never
// taken as a last resort, as a stream's dial to it is. A nil socket
// means the n datagrams are dropped, and counted.
func (u *udpRoute) upstream(r *Route, ts *targetSet, pinned int, client netip.AddrPort, now int64, n uint64) (*backend, *udp.Conn, syscall.RawConn) {
	st := &u.rt.st
	var tried triedSet
	for {
		var b *backend
		var tg *udpTarget
		for tg == nil {
			if pinned >= 0 && !tried.has(pinned) {
				tried.add(pinned)
				if b = ts.bs[pinned]; b.isDown(&now) {
					continue
				}
			} else if b = u.rt.targets().pick(client.Addr(), &tried); b == nil {
				st.udpDropWrite.Add(n)
				return nil, nil, nil
			}
			tg = u.targetFor(b, now)
		}
		up, rc, err := openUpstream(tg, r.UDPBuffer)
		if err != nil {
			st.errDial.Add(1)
			if exhausted(err) {
				// The relay's own lack of descriptors or memory: no
				// other target would do better, and none is to blame.
				st.udpDropWrite.Add(n)
				u.sockFailed(client, err)
				return nil, nil, nil
			}
			// connect(2) refused the target's address itself: no
			// route to it (ENETUNREACH, an IPv6 target on a host
			// without IPv6), or an address it cannot reach (EINVAL,
			// EADDRNOTAVAIL). It fails so for every client: it is
			// down, as a stream's failed dial marks it, and the
			// client goes to the next target.
			b.dialFailed(err)
			continue
		}
		if u.rt.srv.sendsToSelf(up) {
			up.Close()
			b.loops.Store(true)
			b.dialFailed(errLoop)
			continue
		}
		return b, up, rc
	}
}

// sockFailed logs a session socket that would not open for client, as
// u.sockLog paces it: the first failure of an episode in full, then a
// count every 30 s while they go on, the others at debug level. Each
// datagram of a client without a session tries again, so at the
// descriptor limit (EMFILE) a line per failure would be a line per
// datagram.
func (u *udpRoute) sockFailed(client netip.AddrPort, err error) {
	log := u.rt.srv.log
	switch begins, n := u.sockLog.note(); {
	case begins:
		log.Warn("UDP upstream socket failed", "route", u.rt.name, "client", client, "err", err)
	case n > 0:
		log.Warn("UDP upstream sockets still failing", "route", u.rt.name, "failures", n, "err", err)
	case log.Enabled(context.Background(), slog.LevelDebug):
		log.Debug("UDP upstream socket failed", "route", u.rt.name, "client", client, "err", err)
	}
}

// dropped counts n datagrams dropped under c, lookup's counter. At the
// session limit it logs as u.limitLog paces it: the first drop of an
// episode, then a count every 30 s while drops go on, never a line per
// datagram.
func (u *udpRoute) dropped(c *atomic.Uint64, n uint64, r *Route) {
	c.Add(n)
	if c != &u.rt.st.udpDropLimit {
		return
	}
	switch begins, k := u.limitLog.note(); {
	case begins:
		u.rt.srv.log.Warn("UDP route at its session limit; datagrams of new clients are dropped",
			"route", u.rt.name, "max_sessions", r.MaxSessions)
	case k > 0:
		u.rt.srv.log.Warn("UDP route still at its session limit", "route", u.rt.name, "drops", k)
	}
}

// lookup, with u.mu held, returns the session for key, marked used at now
// (under u.mu, where a session decides it has expired: found here, it is
// not expiring); or, when no new session may open, the counter its
// datagrams are dropped under.
func (u *udpRoute) lookup(a *arrival, r *Route, now int64) (*session, *atomic.Uint64) {
	if s := u.at(a); s != nil {
		s.touch(now)
		return s, nil
	}
	switch {
	case u.closed:
		return nil, &u.rt.st.udpDropWrite
	case len(u.sessions) >= r.MaxSessions:
		return nil, &u.rt.st.udpDropLimit
	}
	return nil, nil
}

// openUpstream opens a session's socket, connected to tg.
func openUpstream(tg *udpTarget, buf int) (*udp.Conn, syscall.RawConn, error) {
	uc, err := net.DialUDP(tg.network, nil, net.UDPAddrFromAddrPort(tg.addr))
	if err != nil {
		return nil, nil, err
	}
	// GRO off: replies are read only after the socket polls readable, and
	// GRO leftovers kept inside the Conn would not make it readable.
	// The same buffers as the listening socket: a burst of replies
	// waits for the session instead of being dropped.
	up, err := udp.NewConn(uc, &udp.Options{DisableGRO: true, ReadBuffer: buf, WriteBuffer: buf})
	if err != nil {
		uc.Close()
		return nil, nil, err
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		up.Close()
		return nil, nil, err
	}
	return up, rc, nil
}

// batch is a reply batch's messages and buffer, taken from the pools only
// while replies are being moved: an idle session holds none.
type batch struct {
	buf     []byte
	in, out [replyBatch]udp.Message
}

var batches = sync.Pool{New: func() any { return new(batch) }}

// run relays the target's replies to the client until the session has
// been idle for timeout or the route closes.
func (s *session) run(timeout time.Duration) {
	u := s.u
	st := &u.rt.st
	defer func() {
		u.mu.Lock()
		u.unlink(s)
		u.mu.Unlock()
		s.up.Close()
		if s.limit != nil {
			close(s.limit.done)
		}
		s.b.connEnd(0, 0) // a UDP route counts datagrams, not bytes
		st.udpSessions.Add(-1)
		u.rt.srv.serveWG.Done()
	}()
	// The read deadline is moved only when it fires: last only grows, so
	// a deadline set earlier is never later than the session's real end,
	// and re-arming the runtime timer for every datagram is avoided.
	s.up.SetReadDeadline(s.deadline(timeout))
	for {
		err := s.relayReplies()
		switch {
		case err == nil:
		case errors.Is(err, net.ErrClosed):
			return
		case isTimeout(err):
			// Decided under u.mu, where readers find the session and
			// mark it used: a reader that found it has moved last on,
			// and one that looks after it left opens a new one. No
			// datagram goes to a session that is on its way out.
			u.mu.Lock()
			deadline := s.deadline(timeout)
			now := time.Now()
			expired := !now.Before(deadline)
			if expired {
				u.unlink(s)
			}
			u.mu.Unlock()
			if expired && s.overDuration(now.UnixNano()) {
				st.maxDurations.Add(1)
				u.rt.srv.log.Debug("UDP session reached its max duration", "route", u.rt.name, "client", s.client())
				return
			}
			if expired {
				u.rt.srv.log.Debug("UDP session expired", "route", u.rt.name, "client", s.client())
				return
			}
			s.up.SetReadDeadline(deadline)
		case icmpError(err):
			// The target's host or port answered ICMP unreachable, or
			// a router on the way fragmentation needed (a later read
			// reports it once). A refusal, nobody on the port or a
			// firewall's reject: the target is marked down and, if
			// the route has another, the session ends so that the
			// client's next datagrams open one on another target.
			// Otherwise the session stays: the target may come back,
			// and the kernel fragments to the path MTU it learnt.
			if refusal(err) {
				s.failover(err)
			}
		default:
			// Anything else would fail again at once: end the session
			// rather than spin on it.
			u.rt.srv.log.Warn("UDP session read failed", "route", u.rt.name, "client", s.client(), "err", err)
			return
		}
	}
}

// icmpError reports whether err is what a connected UDP socket returns
// after an ICMP error from the target or the path: transient, reported
// once, by the next call on the socket. EMSGSIZE is an ICMP fragmentation
// needed: a socket does path MTU discovery by default (IP_PMTUDISC_WANT,
// ip(7)), and udp_err reports it to a connected one as a hard error, as
// it does a parameter problem (EPROTO) and a protocol unreachable
// (ENOPROTOOPT); EOPNOTSUPP is a source route failed (icmp_err_convert,
// icmpv6_err_convert).
func icmpError(err error) bool {
	for _, e := range []syscall.Errno{syscall.ECONNREFUSED, syscall.EACCES, syscall.EHOSTUNREACH, syscall.ENETUNREACH,
		syscall.EHOSTDOWN, syscall.EMSGSIZE, syscall.EPROTO, syscall.ENOPROTOOPT, syscall.EOPNOTSUPP} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// refusal reports whether err, an ICMP error, is the target refusing
// datagrams: port unreachable (ECONNREFUSED), administratively
// prohibited, a firewall's reject, which IPv4 reports as ECONNREFUSED
// too (icmp_err_convert) and IPv6 as EACCES (icmpv6_err_convert), or
// protocol unreachable, a host without UDP (ENOPROTOOPT).
func refusal(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.ENOPROTOOPT)
}

// release returns b's buffer to the pool and b to batches.
func (b *batch) release() {
	pool.Put(b.buf)
	b.buf = nil
	clear(b.in[:])
	clear(b.out[:])
	batches.Put(b)
}

// sendReplies sends the n replies in b to the client from the address the
// client used. It reports false when the route's socket is closed.
func (s *session) sendReplies(b *batch, n int) bool {
	s.touch(time.Now().UnixNano())
	s.b.dialOK() // the target answers: up, if a refusal had marked it down
	st := &s.u.rt.st
	if s.quic != nil {
		s.learnIDs(b.in[:n])
	}
	p := s.peer.Load()
	out := b.out[:0]
	for _, m := range b.in[:n] {
		if m.Truncated {
			st.udpDropTruncated.Add(1)
			continue
		}
		out = append(out, udp.Message{Buf: m.Buf[:m.N], Addr: p.client, Local: p.local, IfIndex: p.ifidx})
	}
	if s.paced(dirDown) {
		out = s.pace(dirDown, out)
	}
	return s.writeReplies(out)
}

// writeReplies sends out, replies to the client, from the route's socket
// the client used. It reports false when that socket is closed.
func (s *session) writeReplies(out []udp.Message) bool {
	if len(out) == 0 {
		return true
	}
	st := &s.u.rt.st
	ln := s.ln.Load()
	sent, err := ln.WriteAll(out)
	if errors.Is(err, net.ErrClosed) {
		// A reload that lowered the route's workers closed the socket
		// (udpRoute.shrink): the replies leave from one that stays,
		// bound to the same address.
		if ln2 := s.u.first.Load(); ln2 != ln {
			s.ln.Store(ln2)
			var n int
			n, err = ln2.WriteAll(out[sent:])
			sent += n
		}
	}
	st.udpPacketsDown.Add(uint64(sent))
	if err != nil {
		st.udpDropWrite.Add(uint64(len(out) - sent))
		if errors.Is(err, net.ErrClosed) {
			return false
		}
	}
	return true
}

// touch moves the session's last use on to t; last never goes back.
func (s *session) touch(t int64) {
	for {
		old := s.last.Load()
		if t <= old || s.last.CompareAndSwap(old, t) {
			return
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// failover marks the session's target down after it refused a datagram
// (ECONNREFUSED or EACCES, see refusal) and, if the route has another
// target, ends the session: it leaves the route's sessions before its
// socket closes, so that the client's next datagram opens a new session,
// on a target that is up.
func (s *session) failover(err error) {
	s.b.dialFailed(err)
	u := s.u
	if !hasOther(u.rt.targets(), s.b) {
		return
	}
	u.mu.Lock()
	u.unlink(s)
	u.mu.Unlock()
	s.up.Close()
}

// hasOther reports whether ts has a target other than b that takes new
// sessions (a positive weight). Counting ts's targets is not enough: b
// may be one a reload removed or gave weight 0, which a session under
// way keeps, and the route's one target is then another.
func hasOther(ts *targetSet, b *backend) bool {
	for i, o := range ts.bs {
		if o != b && ts.weight(i) > 0 && o.admin.takes() {
			return true
		}
	}
	return false
}
