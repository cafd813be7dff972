package relay

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zeroio/zeroio/pool"
	"github.com/zeroio/zeroio/udp"
)

const (
	maxDatagram = 65535 // the largest UDP payload plus headroom; smaller buffers would truncate
	udpBatch    = DefaultUDPBatch
	// replyBatch is the most replies a session reads before sending them
	// on, and replyBuf the pooled buffer they are read into, one after
	// another: each read(2) is given 65,535 bytes, so no reply is ever
	// truncated, and 128 KiB holds a full batch of replies up to about
	// 2 KiB (larger ones end a batch early).
	replyBatch = 32
	replyBuf   = 128 << 10
	// maxDrained bounds what a stopping route's reader still relays from
	// its socket, so that a client that keeps sending cannot hold a reload
	// or a shutdown up: more than a default receive buffer holds.
	maxDrained = 1 << 16
	// resolveTimeout bounds one lookup of a target's host name.
	resolveTimeout = 5 * time.Second
)

// resolveEvery is how often a UDP target given by host name is looked up
// again, for the sessions that open after: a DNS change reaches new
// sessions within this time, while a session under way keeps its address.
var resolveEvery = 30 * time.Second

// lookupNetIP looks a host name up; tests replace it to change what a name
// resolves to.
var lookupNetIP = net.DefaultResolver.LookupNetIP

// udpRoute relays datagrams: one session per client address (and local
// address, see sessionKey), each with its own connected upstream socket.
// With Workers > 1 the route has that many listening sockets in one
// SO_REUSEPORT group, each with its own reader; the kernel hashes each
// client to one of them, and the sessions are shared.
type udpRoute struct {
	rt  *route
	lns []*udp.Conn
	to  atomic.Pointer[udpAddrs] // the targets' addresses; Update may change them

	readers  sync.WaitGroup // the run goroutines
	stopping atomic.Bool    // close has begun: readers relay what is queued and exit

	mu       sync.Mutex
	sessions map[sessionKey]*session
	closed   bool
}

// udpTarget is a route's target address, resolved.
type udpTarget struct {
	network string
	addr    netip.AddrPort
	from    Addr  // as configured
	byName  bool  // from names a host, not an IP address: look it up again
	at      int64 // unix nanoseconds of the lookup
}

// udpAddrs are a UDP route's targets resolved, by configured address.
type udpAddrs map[Addr]*udpTarget

// resolved is a route's targets looked up ahead of their use, or the
// error that gave.
type resolved struct {
	to  udpAddrs
	err error
}

// get returns the targets of r: res's if res is not nil, else resolved
// now.
func (res *resolved) get(r *Route) (udpAddrs, error) {
	if res == nil {
		return resolveTargets(r, nil)
	}
	return res.to, res.err
}

// resolveTargets looks up each target of r, taking those known has as
// they are. A target that does not resolve fails the whole route, as a
// bad address would.
func resolveTargets(r *Route, known udpAddrs) (udpAddrs, error) {
	out := udpAddrs{}
	for _, t := range r.Targets {
		if tg := known[t.Addr]; tg != nil {
			out[t.Addr] = tg
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
		tg, err := lookupTarget(ctx, t.Addr)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("target %s: %w", t.Addr, err)
		}
		out[t.Addr] = tg
	}
	return out, nil
}

// lookupTarget resolves a UDP target as net.ResolveUDPAddr does (an IPv4
// address first for "udp"), through lookupNetIP.
func lookupTarget(ctx context.Context, t Addr) (*udpTarget, error) {
	host, port, err := net.SplitHostPort(t.Address)
	if err != nil {
		return nil, err
	}
	p, err := net.DefaultResolver.LookupPort(ctx, t.Network, port)
	if err != nil {
		return nil, err
	}
	tg := &udpTarget{network: t.Network, from: t, at: time.Now().UnixNano()}
	if ip, err := netip.ParseAddr(host); err == nil {
		tg.addr = netip.AddrPortFrom(ip.Unmap(), uint16(p))
		return tg, nil
	}
	tg.byName = true
	ipnet := map[string]string{"udp4": "ip4", "udp6": "ip6"}[t.Network]
	if ipnet == "" {
		ipnet = "ip"
	}
	ips, err := lookupNetIP(ctx, ipnet, host)
	if err != nil {
		return nil, err
	}
	if len(ips) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	ip := ips[0]
	for _, a := range ips {
		if a.Unmap().Is4() {
			ip = a
			break
		}
	}
	tg.addr = netip.AddrPortFrom(ip.Unmap(), uint16(p))
	return tg, nil
}

// targetFor returns the address of b, the target a session opening at now
// goes to (nil if a reload just dropped it). A target given by host name
// is looked up again in the background once resolveEvery has passed
// since the last lookup; sessions go to the last address meanwhile.
func (u *udpRoute) targetFor(b *backend, now int64) *udpTarget {
	tg := (*u.to.Load())[b.addr]
	if tg != nil && tg.byName && now-tg.at >= int64(resolveEvery) && b.resolving.CompareAndSwap(false, true) {
		u.rt.srv.serveWG.Add(1)
		go u.refresh(b, tg)
	}
	return tg
}

// refresh looks old's host name up again and makes the answer b's
// address, unless a reload changed it meanwhile. On an error the route
// keeps the address it had, and tries again after resolveEvery.
func (u *udpRoute) refresh(b *backend, old *udpTarget) {
	defer u.rt.srv.serveWG.Done()
	defer b.resolving.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	tg, err := lookupTarget(ctx, old.from)
	if err != nil {
		u.rt.srv.log.Warn("UDP target lookup failed; keeping its last address", "route", u.rt.name, "target", old.from.String(), "addr", old.addr, "err", err)
		again := *old
		again.at = time.Now().UnixNano()
		tg = &again
	} else if tg.addr != old.addr {
		u.rt.srv.log.Info("UDP target moved", "route", u.rt.name, "target", old.from.String(), "from", old.addr, "to", tg.addr)
	}
	for {
		cur := u.to.Load()
		if (*cur)[old.from] != old {
			return // a reload changed it
		}
		next := make(udpAddrs, len(*cur))
		maps.Copy(next, *cur)
		next[old.from] = tg
		if u.to.CompareAndSwap(cur, &next) {
			return
		}
	}
}

// update applies a reload's r to the route's sockets: new sessions go to
// r's targets (a session under way keeps its own, so that its client's
// flow goes on), and the listening sockets take r's buffer size. On an
// error nothing has changed.
func (u *udpRoute) update(cur, r *Route, res *resolved) error {
	if !slices.Equal(cur.Targets, r.Targets) {
		to, err := res.get(r)
		if err != nil {
			return err
		}
		u.to.Store(&to)
	}
	if r.UDPBuffer != cur.UDPBuffer {
		for _, ln := range u.lns {
			err := ln.SetReadBuffer(r.UDPBuffer)
			if err == nil {
				err = ln.SetWriteBuffer(r.UDPBuffer)
			}
			if err != nil {
				u.rt.srv.log.Warn("UDP buffer size unchanged", "route", u.rt.name, "err", err)
			}
		}
	}
	return nil
}

// sessionKey identifies a session: the client's address, and on a socket
// bound to a wildcard address the local address the client sent to (zero
// otherwise). A client may reach the route at several of the host's
// addresses from one socket, and each flow's replies must leave from the
// address it used, so each is a session of its own.
type sessionKey struct {
	client netip.AddrPort
	local  netip.Addr
}

// session is one client's flow. Its goroutine reads the target's replies;
// the route's readers forward the client's datagrams to up.
type session struct {
	u      *udpRoute
	ln     *udp.Conn // the listening socket replies leave from
	client netip.AddrPort
	local  netip.Addr // the address the client sent to: replies leave from it
	ifidx  int
	b      *backend // the session's target
	up     *udp.Conn
	rc     syscall.RawConn
	reply  replyState   // the Linux read callback's state; session goroutine only
	last   atomic.Int64 // unix nanoseconds of the last datagram either way
	out    []udp.Message
}

func listenUDP(rt *route, r *Route, res *resolved) (*udpRoute, error) {
	to, err := res.get(r)
	if err != nil {
		return nil, err
	}
	la, err := net.ResolveUDPAddr(r.Listen.Network, r.Listen.Address)
	if err != nil {
		return nil, err
	}
	lc, err := listenConfig(r)
	if err != nil {
		return nil, err
	}
	u := &udpRoute{rt: rt, sessions: map[sessionKey]*session{}}
	u.to.Store(&to)
	addr := la.String()
	for range r.Workers {
		pc, err := lc.ListenPacket(context.Background(), r.Listen.Network, addr)
		if err != nil {
			u.closeListeners()
			return nil, err
		}
		addr = pc.LocalAddr().String() // port 0 becomes the port the others share
		// Packet info tells a socket bound to a wildcard address which
		// of the host's addresses a client sent to, so that the reply
		// leaves from it. A socket bound to one address replies from
		// that address anyway, and without the control messages each
		// datagram costs less (a lone reply goes out with sendto(2)).
		ln, err := udp.NewConn(pc.(*net.UDPConn), &udp.Options{
			PacketInfo: la.IP == nil || la.IP.IsUnspecified(),
			ReadBuffer: r.UDPBuffer, WriteBuffer: r.UDPBuffer,
		})
		if err != nil {
			pc.Close()
			u.closeListeners()
			return nil, err
		}
		u.lns = append(u.lns, ln)
	}
	return u, nil
}

func (u *udpRoute) addrs() []net.Addr {
	as := make([]net.Addr, len(u.lns))
	for i, ln := range u.lns {
		as[i] = ln.LocalAddr()
	}
	return as
}

func (u *udpRoute) closeListeners() {
	for _, ln := range u.lns {
		ln.Close()
	}
}

// close stops the route: the readers relay the datagrams their sockets
// still hold (a reload or a stop loses none that had arrived) and exit,
// then every session ends.
func (u *udpRoute) close() {
	u.stopping.Store(true)
	for _, ln := range u.lns {
		ln.SetReadDeadline(time.Unix(1, 0)) // wakes a blocked ReadBatch
	}
	u.readers.Wait()
	u.mu.Lock()
	u.closed = true
	for _, s := range u.sessions {
		s.up.Close()
	}
	u.mu.Unlock()
	u.closeListeners()
}

// run reads client datagrams from ln in batches and forwards each to its
// session's upstream socket, one WriteBatch per session per batch (GSO
// coalesces equal-sized runs).
func (u *udpRoute) run(ln *udp.Conn) {
	defer u.rt.srv.serveWG.Done()
	defer u.readers.Done()
	st := &u.rt.st
	msgs := make([]udp.Message, udpBatch)
	for i := range msgs {
		msgs[i].Buf = make([]byte, maxDatagram)
	}
	var touched []*session
	for {
		n, err := ln.ReadBatch(msgs)
		if err != nil {
			if u.stopping.Load() {
				u.drain(ln, msgs, touched)
				return
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			st.errAccept.Add(1)
			u.rt.srv.log.Warn("UDP read failed", "route", u.rt.name, "err", err)
			select {
			case <-time.After(10 * time.Millisecond):
			case <-u.rt.done:
				return
			}
			continue
		}
		touched = u.relayBatch(ln, msgs[:n], touched)
	}
}

// drain relays what ln still holds once the route is stopping: the
// datagrams a ReadBatch left pending and those queued on the socket, up
// to maxDrained, without waiting for more.
func (u *udpRoute) drain(ln *udp.Conn, msgs []udp.Message, touched []*session) {
	for done := 0; done < maxDrained; {
		n, err := ln.ReadQueued(msgs)
		if n == 0 || err != nil {
			return
		}
		touched = u.relayBatch(ln, msgs[:n], touched)
		done += n
	}
}

// relayBatch forwards the client datagrams in msgs, read from ln, to their
// sessions, one WriteBatch per session. touched is scratch, returned for
// reuse.
func (u *udpRoute) relayBatch(ln *udp.Conn, msgs []udp.Message, touched []*session) []*session {
	st := &u.rt.st
	now := time.Now().UnixNano()
	r := u.rt.cfg.Load()
	for i := range msgs {
		m := &msgs[i]
		if m.Truncated {
			st.udpDropTruncated.Add(1)
			continue
		}
		s := u.session(r, ln, m, now, 1)
		if s == nil {
			continue
		}
		if len(s.out) == 0 {
			touched = append(touched, s)
		}
		s.out = append(s.out, udp.Message{Buf: m.Buf[:m.N]})
	}
	for _, s := range touched {
		u.forward(r, s, s.out)
		clear(s.out)
		s.out = s.out[:0]
	}
	clear(touched)
	return touched[:0]
}

// forward sends msgs, the client's datagrams that a batch found s for, to
// the target.
func (u *udpRoute) forward(r *Route, s *session, msgs []udp.Message) {
	st := &u.rt.st
	sent, err := s.up.WriteAll(msgs)
	if errors.Is(err, net.ErrClosed) {
		// s ended after the batch found it: it failed, or the route is
		// closing. (It cannot have expired since: finding it marked it
		// used, under the lock its expiry is decided under.) It left the
		// route's sessions before closing its socket, so session opens a
		// new one (unless the route is closing), and the datagrams go on
		// as if they had come a moment later.
		m := udp.Message{Addr: s.client, Local: s.local, IfIndex: s.ifidx}
		s2 := u.session(r, s.ln, &m, time.Now().UnixNano(), uint64(len(msgs)-sent))
		if s2 == nil { // dropped, and counted by session under its reason
			st.udpPacketsUp.Add(uint64(sent))
			return
		}
		if s2 != s {
			var n int
			n, err = s2.up.WriteAll(msgs[sent:])
			sent += n
		}
	}
	st.udpPacketsUp.Add(uint64(sent))
	if err != nil {
		// ECONNREFUSED: an earlier datagram drew ICMP port unreachable
		// from the target (udp(7)); the rest of the batch is lost, and
		// counted, and the client's next datagrams go to another target.
		st.udpDropWrite.Add(uint64(len(msgs) - sent))
		if errors.Is(err, syscall.ECONNREFUSED) {
			s.failover(err)
		}
	}
}

// session returns the client's session, marked used at now, creating it if
// there is room and the access lists admit the client. nil means the n
// datagrams it was looked up for are dropped; session counts them.
func (u *udpRoute) session(r *Route, ln *udp.Conn, m *udp.Message, now int64, n uint64) *session {
	key := sessionKey{m.Addr, m.Local}
	u.mu.Lock()
	s, drop := u.lookup(key, r, now)
	u.mu.Unlock()
	if s != nil {
		return s
	}
	if drop != nil {
		drop.Add(n)
		return nil
	}
	st := &u.rt.st
	if !allowed(r.Allow, r.Deny, m.Addr.Addr()) {
		st.denied.Add(n)
		return nil
	}
	// The session's target, for as long as it lives: a client's flow
	// stays on one target.
	var tried triedSet
	b := u.rt.targets().pick(m.Addr.Addr(), &tried)
	var tg *udpTarget
	if b != nil {
		tg = u.targetFor(b, now)
	}
	if tg == nil {
		st.udpDropWrite.Add(n)
		return nil
	}
	up, rc, err := openUpstream(tg, r.UDPBuffer)
	if err != nil {
		st.udpDropWrite.Add(n)
		st.errDial.Add(1)
		u.rt.srv.log.Warn("UDP upstream socket failed", "route", u.rt.name, "client", m.Addr, "err", err)
		return nil
	}
	// Looked up again: with several workers another reader may have taken
	// the last slot, or opened this very session, while we dialled.
	u.mu.Lock()
	other, drop := u.lookup(key, r, now)
	if other == nil && drop == nil {
		s = &session{u: u, b: b, ln: ln, client: m.Addr, local: m.Local, ifidx: m.IfIndex, up: up, rc: rc}
		s.last.Store(now)
		u.sessions[key] = s
	}
	u.mu.Unlock()
	if s == nil {
		up.Close()
		if drop != nil {
			drop.Add(n)
		}
		return other
	}
	st.udpSessions.Add(1)
	st.udpSessionsTotal.Add(1)
	u.rt.srv.log.Debug("UDP session", "route", u.rt.name, "client", m.Addr)
	u.rt.srv.serveWG.Add(1)
	go s.run(r.SessionTimeout)
	return s
}

// lookup, with u.mu held, returns the session for key, marked used at now
// (under u.mu, where a session decides it has expired: found here, it is
// not expiring); or, when no new session may open, the counter its
// datagrams are dropped under.
func (u *udpRoute) lookup(key sessionKey, r *Route, now int64) (*session, *atomic.Uint64) {
	if s := u.sessions[key]; s != nil {
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
		if k := (sessionKey{s.client, s.local}); u.sessions[k] == s {
			delete(u.sessions, k)
		}
		u.mu.Unlock()
		s.up.Close()
		st.udpSessions.Add(-1)
		u.rt.srv.serveWG.Done()
	}()
	// The read deadline is moved only when it fires: last only grows, so
	// a deadline set earlier is never later than the session's real end,
	// and re-arming the runtime timer for every datagram is avoided.
	s.up.SetReadDeadline(time.Unix(0, s.last.Load()).Add(timeout))
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
			deadline := time.Unix(0, s.last.Load()).Add(timeout)
			expired := !time.Now().Before(deadline)
			if k := (sessionKey{s.client, s.local}); expired && u.sessions[k] == s {
				delete(u.sessions, k)
			}
			u.mu.Unlock()
			if expired {
				u.rt.srv.log.Debug("UDP session expired", "route", u.rt.name, "client", s.client)
				return
			}
			s.up.SetReadDeadline(deadline)
		case icmpError(err):
			// The target's host or port answered ICMP unreachable (a
			// later read reports it once). ECONNREFUSED, nobody on the
			// port: the target is marked down and, if the route has
			// another, the session ends so that the client's next
			// datagrams open one on another target. Otherwise the
			// session stays: the target may come back.
			if errors.Is(err, syscall.ECONNREFUSED) {
				s.failover(err)
			}
		default:
			// Anything else would fail again at once: end the session
			// rather than spin on it.
			u.rt.srv.log.Warn("UDP session read failed", "route", u.rt.name, "client", s.client, "err", err)
			return
		}
	}
}

// icmpError reports whether err is what a connected UDP socket returns
// after an ICMP error from the target: transient, reported once.
func icmpError(err error) bool {
	for _, e := range []syscall.Errno{syscall.ECONNREFUSED, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.EHOSTDOWN} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
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
	out := b.out[:0]
	for _, m := range b.in[:n] {
		if m.Truncated {
			st.udpDropTruncated.Add(1)
			continue
		}
		out = append(out, udp.Message{Buf: m.Buf[:m.N], Addr: s.client, Local: s.local, IfIndex: s.ifidx})
	}
	sent, err := s.ln.WriteAll(out)
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
// (ECONNREFUSED) and, if the route has another target, ends the session:
// it leaves the route's sessions before its socket closes, so that the
// client's next datagram opens a new session, on a target that is up.
func (s *session) failover(err error) {
	s.b.dialFailed(err)
	u := s.u
	if u.rt.targets().npos < 2 {
		return
	}
	u.mu.Lock()
	if k := (sessionKey{s.client, s.local}); u.sessions[k] == s {
		delete(u.sessions, k)
	}
	u.mu.Unlock()
	s.up.Close()
}
